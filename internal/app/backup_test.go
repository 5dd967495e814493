package app_test

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// adminClient dials r's gRPC address for the Admin service.
func adminClient(t *testing.T, r *running) adminv1.AdminClient {
	t.Helper()
	conn, err := grpc.NewClient(r.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return adminv1.NewAdminClient(conn)
}

// A backup taken while saves run restores into a new hub: everything saved
// before the backup is there, a pending bundle is pending with its id, and a
// save sent again is a duplicate.
func TestABackupTakenWhileSavesRunRestoresIntoANewHub(t *testing.T) {
	parent := t.TempDir()
	cfg := testConfig(t)
	cfg.DataDir = filepath.Join(parent, "data")
	r := start(t, cfg)
	ctx := callContext(t)

	// A pending bundle, with an id the actor chose.
	actor := uuid.NewString()
	var first []*messagehubv1.DataAvailable
	for range 5 {
		first = append(first, notification(actor))
	}
	if _, err := r.client.Save(ctx, &messagehubv1.SaveRequest{Notifications: first}); err != nil {
		t.Fatal(err)
	}
	bundleID := uuid.NewString()
	peeked, err := r.client.Peek(ctx, &messagehubv1.PeekRequest{Recipient: actor, BundleId: bundleID})
	if err != nil || peeked.GetBundle().GetId() != bundleID {
		t.Fatalf("Peek: %v %v", peeked.GetBundle(), err)
	}

	// Saves run on while the backup is taken: each saver keeps the saves
	// answered before the backup began, and stops after it ended.
	const savers, maxSaves = 2, 1000
	var (
		mu           sync.Mutex
		before       []*messagehubv1.DataAvailable // answered before the backup began
		backingUp    bool
		stop         = make(chan struct{})
		running, wg  sync.WaitGroup
		saveFailures = make(chan error, savers)
	)
	running.Add(savers)
	for s := range savers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started := false
			defer func() {
				if !started {
					running.Done() // failed early: the failure is reported
				}
			}()
			for i := range maxSaves {
				select {
				case <-stop:
					return
				default:
				}
				recipient := actor
				if s == 1 {
					recipient = uuid.NewString()
				}
				batch := []*messagehubv1.DataAvailable{notification(recipient), notification(recipient)}
				if _, err := r.client.Save(ctx, &messagehubv1.SaveRequest{Notifications: batch}); err != nil {
					saveFailures <- err
					return
				}
				mu.Lock()
				if !backingUp {
					before = append(before, batch...)
				}
				mu.Unlock()
				if i == 49 && !started {
					started = true
					running.Done() // fifty saves in: the backup may begin
				}
			}
		}()
	}
	running.Wait()
	mu.Lock()
	backingUp = true
	mu.Unlock()
	resp, err := adminClient(t, r).Backup(ctx, &adminv1.BackupRequest{Directory: "backup-1"})
	close(stop)
	wg.Wait()
	close(saveFailures)
	for err := range saveFailures {
		t.Fatalf("a save while backing up: %v", err)
	}
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	want := filepath.Join(parent, "backup-1")
	if resp.GetDirectory() != want || resp.GetBytes() <= 0 {
		t.Fatalf("Backup wrote %q (%d bytes); want %s, not empty", resp.GetDirectory(), resp.GetBytes(), want)
	}
	t.Logf("backup of %d bytes in %d ms, %d saves answered before it", resp.GetBytes(), resp.GetTookMs(), len(before)/2)

	// The same directory again is refused, on the HTTP gateway too.
	if _, err := adminClient(t, r).Backup(ctx, &adminv1.BackupRequest{Directory: want}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a backup into an existing directory: %v; want INVALID_ARGUMENT", err)
	}
	code, body := send(t, http.MethodPost, "http://"+r.app.HTTPAddr()+"/admin/v1/backup", `{"directory": "backup-1"}`)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "exists already") {
		t.Fatalf("POST /admin/v1/backup into an existing directory: %d %s; want 400, saying so", code, body)
	}
	if err := r.closeWithin(t); err != nil {
		t.Fatal(err)
	}

	// Restore: a new hub on the backup.
	restored := testConfig(t)
	restored.DataDir = want
	nr := start(t, restored)
	again, err := nr.client.Peek(ctx, &messagehubv1.PeekRequest{Recipient: actor})
	if err != nil || again.GetBundle().GetId() != bundleID {
		t.Fatalf("Peek after restore: %v %v; want the pending bundle %s", again.GetBundle(), err, bundleID)
	}
	if got, want := again.GetBundle().GetNotificationIds(), ids(first); !slices.Equal(got, want) {
		t.Fatalf("the pending bundle holds %v; want %v", got, want)
	}
	dup, err := nr.client.Save(ctx, &messagehubv1.SaveRequest{Notifications: append(slices.Clone(first), before...)})
	if err != nil {
		t.Fatal(err)
	}
	if dup.GetSaved() != 0 || int(dup.GetDuplicates()) != len(first)+len(before) {
		t.Fatalf("saves sent again: %d saved, %d duplicates; want all %d duplicates",
			dup.GetSaved(), dup.GetDuplicates(), len(first)+len(before))
	}
	// The actor's saves before the backup follow its pending bundle.
	if _, err := nr.client.Dequeue(ctx, &messagehubv1.DequeueRequest{Recipient: actor, BundleId: bundleID}); err != nil {
		t.Fatal(err)
	}
	next, err := nr.client.Peek(ctx, &messagehubv1.PeekRequest{Recipient: actor})
	if err != nil {
		t.Fatal(err)
	}
	got := next.GetBundle().GetNotificationIds()
	for _, n := range before {
		if n.GetRecipient() == actor && !slices.Contains(got, n.GetId()) {
			t.Fatalf("notification %s, saved before the backup, is not in the next bundle after restore", n.GetId())
		}
	}
	// The original data directory is untouched by the restore.
	if _, err := os.Stat(filepath.Join(parent, "data")); err != nil {
		t.Fatal(err)
	}
}

func ids(ns []*messagehubv1.DataAvailable) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.GetId()
	}
	return out
}

// A backup the hub refuses (a directory inside the data directory, or one
// that exists) is refused before anything is written: no folder is made on
// its way, in the data directory or its documents' folder.
func TestARefusedBackupWritesNothing(t *testing.T) {
	cfg := testConfig(t)
	r := start(t, cfg)
	existing := t.TempDir()
	tree := func() []string {
		var names []string
		for _, root := range []string{cfg.DataDir, existing} {
			if err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					names = append(names, p)
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		return names
	}
	before := tree()
	for _, dir := range []string{
		filepath.Join(cfg.DataDir, "x", "backup"),
		filepath.Join(cfg.DataDir, "content", "x", "backup"),
		existing,
	} {
		if _, err := adminClient(t, r).Backup(callContext(t), &adminv1.BackupRequest{Directory: dir}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("a backup into %s: %v; want INVALID_ARGUMENT", dir, err)
		}
	}
	if after := tree(); !slices.Equal(before, after) {
		t.Fatalf("refused backups left folders: before %v, after %v", before, after)
	}
}

// A backup directory the hub cannot make (a path through a regular file, a
// name the system refuses) is the operator's to correct: INVALID_ARGUMENT
// saying why, not INTERNAL with the reason in the hub's log only. Nothing
// is written.
func TestABackupIntoADirectoryThatCannotBeMadeSaysWhy(t *testing.T) {
	parent := t.TempDir()
	cfg := testConfig(t)
	cfg.DataDir = filepath.Join(parent, "data")
	r := start(t, cfg)
	file := filepath.Join(parent, "backups")
	if err := os.WriteFile(file, []byte("not a folder"), 0o600); err != nil {
		t.Fatal(err)
	}
	for dir, why := range map[string]string{
		filepath.Join(file, "backup-1"):      "not a directory", // its parent is a file
		filepath.Join("backups", "backup-1"): "not a directory", // the same, relative to the data directory's parent
		filepath.Join(file, "a", "backup-1"): "not a directory", // a parent to make under a file
		filepath.Join(parent, "a\x00b"):      "invalid argument",
	} {
		_, err := adminClient(t, r).Backup(callContext(t), &adminv1.BackupRequest{Directory: dir})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), why) {
			t.Errorf("a backup into %q: %v; want INVALID_ARGUMENT saying %q", dir, err, why)
		}
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "data" && e.Name() != "backups" {
			t.Errorf("refused backups left %s in %s", e.Name(), parent)
		}
	}
}

// "One inside the data directory is refused" holds whichever way the paths
// reach it: a data directory named through a symbolic link (a volume
// mounted elsewhere and linked into place), or a backup directory named
// through one. Compared as written, such a backup was taken into the data
// directory itself, which the next backups onto the volume then counted
// as data.
func TestABackupInsideTheDataDirectoryThroughALinkIsRefused(t *testing.T) {
	parent := t.TempDir()
	volume := filepath.Join(parent, "volume")
	if err := os.Mkdir(volume, 0o750); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(parent, "link")
	if err := os.Symlink(volume, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dataDir, backup string }{
		{filepath.Join(link, "data"), filepath.Join(volume, "data", "backup-1")},
		{filepath.Join(link, "data"), filepath.Join(volume, "data", "content", "backup-1")},
		{filepath.Join(volume, "data"), filepath.Join(link, "data", "backup-1")},
	} {
		cfg := testConfig(t)
		cfg.DataDir = c.dataDir
		r := start(t, cfg)
		_, err := adminClient(t, r).Backup(callContext(t), &adminv1.BackupRequest{Directory: c.backup})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "inside the data directory") {
			t.Errorf("data directory %s, a backup into %s: %v; want INVALID_ARGUMENT, inside the data directory", c.dataDir, c.backup, err)
		}
		if err := r.closeWithin(t); err != nil {
			t.Fatal(err)
		}
		var left []string
		_ = filepath.WalkDir(volume, func(p string, d os.DirEntry, err error) error {
			if err == nil && (d.Name() == "backup-1" || strings.HasPrefix(d.Name(), ".messagehub-backup")) {
				left = append(left, p)
			}
			return err
		})
		if len(left) > 0 {
			t.Errorf("the refused backup left %v", left)
		}
		if err := os.RemoveAll(filepath.Join(volume, "data")); err != nil {
			t.Fatal(err)
		}
	}
}
