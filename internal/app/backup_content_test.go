package app_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/app"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// sweptBeforeCheckpoint is a store whose Backup (the checkpoint, which the
// hub takes after copying the documents) first waits, for at most bound, for
// retention to remove the dequeued bundle it is armed with.
type sweptBeforeCheckpoint struct {
	store.Store
	recipient, bundleID string
	bound               time.Duration
}

func (s *sweptBeforeCheckpoint) Backup(ctx context.Context, dir string) error {
	deadline := time.Now().Add(s.bound)
	for time.Now().Before(deadline) {
		if _, err := s.DequeuedBundle(ctx, s.recipient, s.bundleID); errors.Is(err, domain.ErrNotFound) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s.Store.Backup(ctx, dir)
}

// peekContent reads a whole content peek: its bundle and document.
func peekContent(ctx context.Context, client messagehubv1.MessageHubClient, req *messagehubv1.PeekRequest) (*messagehubv1.Bundle, string, error) {
	stream, err := client.PeekContent(ctx, req)
	if err != nil {
		return nil, "", err
	}
	var bundle *messagehubv1.Bundle
	var data []byte
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return bundle, string(data), nil
		}
		if err != nil {
			return nil, "", err
		}
		if msg.GetBundle() != nil {
			bundle = msg.GetBundle()
		}
		data = append(data, msg.GetData()...)
	}
}

// A backup's documents are copied before the store's checkpoint, so that
// each belongs to a bundle the checkpoint holds. Retention removing a
// bundle in between (its document, then its record) broke that: the copy
// kept the document of a bundle the restored hub does not know, whose id is
// then free, and a later bundle under that id was served it.
func TestABackupHoldsNoDocumentOfABundleRetentionRemovedDuringIt(t *testing.T) {
	provider := contenttest.Start(t, func(b *messagehubv1.Bundle, _ int) contenttest.Answer {
		return contenttest.Document("text/plain", []byte(strings.Join(b.GetNotificationIds(), ",")), 1024)
	})
	parent := t.TempDir()
	actor, bundleID := uuid.NewString(), uuid.NewString()
	config := func(dir string) app.Config {
		cfg := testConfig(t)
		cfg.DataDir = dir
		cfg.Retention = time.Second // the sweeper looks every 250 ms
		cfg.Content.Providers = map[domain.Origin]string{domain.OriginTimeSeries: provider.Address}
		return cfg
	}
	cfg := config(filepath.Join(parent, "data"))
	app.WrapStore(&cfg, func(s store.Store) store.Store {
		return &sweptBeforeCheckpoint{Store: s, recipient: actor, bundleID: bundleID, bound: 5 * time.Second}
	})
	r := start(t, cfg)
	ctx := callContext(t)

	first := notification(actor)
	if _, err := r.client.Save(ctx, &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{first}}); err != nil {
		t.Fatal(err)
	}
	if b, doc, err := peekContent(ctx, r.client, &messagehubv1.PeekRequest{Recipient: actor, BundleId: bundleID}); err != nil || b.GetId() != bundleID || doc != first.GetId() {
		t.Fatalf("content peek: %v %q %v", b, doc, err)
	}
	if _, err := r.client.Dequeue(ctx, &messagehubv1.DequeueRequest{Recipient: actor, BundleId: bundleID}); err != nil {
		t.Fatal(err)
	}
	// The bundle is due a second after its dequeue; the backup's checkpoint
	// waits for the sweeper to remove it (or for as long as it cannot).
	if _, err := adminClient(t, r).Backup(ctx, &adminv1.BackupRequest{Directory: "backup-1"}); err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if err := r.closeWithin(t); err != nil {
		t.Fatal(err)
	}

	nr := start(t, config(filepath.Join(parent, "backup-1")))
	second := notification(actor)
	if _, err := nr.client.Save(ctx, &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{second}}); err != nil {
		t.Fatal(err)
	}
	// The actor peeks with the id it kept: refused while the restored hub
	// retains the dequeued bundle (until its sweeper's turn; callTimeout
	// only bounds a busy machine's wait for it), then a bundle of the new
	// notification.
	peekCtx := callContext(t)
	for peekCtx.Err() == nil {
		b, doc, err := peekContent(peekCtx, nr.client, &messagehubv1.PeekRequest{Recipient: actor, BundleId: bundleID})
		if status.Code(err) == codes.AlreadyExists {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil || b.GetId() != bundleID || len(b.GetNotificationIds()) != 1 || b.GetNotificationIds()[0] != second.GetId() {
			t.Fatalf("content peek after the restore: %v %v; want a bundle %s of %s", b, err, bundleID, second.GetId())
		}
		if doc != second.GetId() {
			t.Fatalf("the bundle %s of %s was served the document %q, of the bundle of that id retention removed during the backup", bundleID, second.GetId(), doc)
		}
		return
	}
	t.Fatalf("the restored hub still refuses the id after %s", callTimeout)
}

// A backup takes the name it was given only once whole: while the store's
// copy is written (and the documents not yet beside it), nothing is under
// that name, so a hub killed then leaves no directory that could be taken
// for a backup and open as a store missing its last writes.
func TestABackupTakesItsNameOnlyWhenWhole(t *testing.T) {
	parent := t.TempDir()
	cfg := testConfig(t)
	cfg.DataDir = filepath.Join(parent, "data")
	final := filepath.Join(parent, "backup-1")
	wrapped := &seenDuringBackup{final: final}
	app.WrapStore(&cfg, func(s store.Store) store.Store { wrapped.Store = s; return wrapped })
	r := start(t, cfg)
	if _, err := r.client.Save(callContext(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{notification(uuid.NewString())}}); err != nil {
		t.Fatal(err)
	}
	if _, err := adminClient(t, r).Backup(callContext(t), &adminv1.BackupRequest{Directory: final}); err != nil {
		t.Fatal(err)
	}
	if wrapped.finalSeen {
		t.Errorf("%s existed while the store's copy was made", final)
	}
	if _, err := os.Stat(filepath.Join(final, "content")); err != nil {
		t.Errorf("the backup has no documents' folder: %v", err)
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "data" && e.Name() != "backup-1" {
			t.Errorf("a backup left %s beside it", filepath.Join(parent, e.Name()))
		}
	}
}

// seenDuringBackup is a store whose Backup (the checkpoint) notes whether
// the backup's final directory exists once its copy is written.
type seenDuringBackup struct {
	store.Store
	final     string
	finalSeen bool
}

func (s *seenDuringBackup) Backup(ctx context.Context, dir string) error {
	err := s.Store.Backup(ctx, dir)
	_, serr := os.Stat(s.final)
	s.finalSeen = serr == nil
	return err
}

// leftDuringBackup is a store whose Backup (the checkpoint) says when it
// has written its copy, then waits for the caller of the backup to leave.
type leftDuringBackup struct {
	store.Store
	checkpointed chan struct{}
}

func (s *leftDuringBackup) Backup(ctx context.Context, dir string) error {
	err := s.Store.Backup(ctx, dir)
	close(s.checkpointed)
	<-ctx.Done()
	return err
}

// A backup whose caller stopped waiting (Ctrl-C on the command, or its
// --timeout passing on a large store) went on to the end and left the
// directory, while the operator was told the call failed: an answer of
// failure leaves no backup behind.
func TestABackupItsCallerLeftIsNotKept(t *testing.T) {
	parent := t.TempDir()
	cfg := testConfig(t)
	cfg.DataDir = filepath.Join(parent, "data")
	wrapped := &leftDuringBackup{checkpointed: make(chan struct{})}
	app.WrapStore(&cfg, func(s store.Store) store.Store { wrapped.Store = s; return wrapped })
	r := start(t, cfg)
	if _, err := r.client.Save(callContext(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{notification(uuid.NewString())}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(callContext(t))
	answered := make(chan error, 1)
	go func() {
		_, err := adminClient(t, r).Backup(ctx, &adminv1.BackupRequest{Directory: "backup-1"})
		answered <- err
	}()
	<-wrapped.checkpointed
	cancel()
	if err := <-answered; status.Code(err) != codes.Canceled {
		t.Fatalf("Backup: %v; want CANCELED", err)
	}
	// Closing waits for the call's handler to end.
	if err := r.closeWithin(t); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "data" {
			t.Errorf("a backup whose caller left kept %s", filepath.Join(parent, e.Name()))
		}
	}
}

// heldCheckpoint is a store whose first Backup (the checkpoint) says it
// began, then waits for release; the others go through.
type heldCheckpoint struct {
	store.Store
	began, release chan struct{}
	first          sync.Once
}

func (s *heldCheckpoint) Backup(ctx context.Context, dir string) error {
	s.first.Do(func() {
		close(s.began)
		<-s.release
	})
	return s.Store.Backup(ctx, dir)
}

// Two backups into one new directory at once (a command run twice, a
// script's retry beside a call still running) both find it free, and one
// takes it: the other is refused as a backup into a directory that exists,
// as it would have been a moment later, not failed as the hub's fault.
func TestTwoBackupsIntoOneDirectoryAtOnceLeaveOneAndRefuseTheOther(t *testing.T) {
	parent := t.TempDir()
	cfg := testConfig(t)
	cfg.DataDir = filepath.Join(parent, "data")
	held := &heldCheckpoint{began: make(chan struct{}), release: make(chan struct{})}
	app.WrapStore(&cfg, func(s store.Store) store.Store { held.Store = s; return held })
	r := start(t, cfg)
	if _, err := r.client.Save(callContext(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{notification(uuid.NewString())}}); err != nil {
		t.Fatal(err)
	}
	answers := make(chan error, 2)
	backup := func() {
		_, err := adminClient(t, r).Backup(callContext(t), &adminv1.BackupRequest{Directory: "backup-1"})
		answers <- err
	}
	go backup()
	<-held.began
	go backup()
	// The second has found the directory free once it has made its
	// folder beside it; it then waits for the first to end.
	waiting := callContext(t)
	for partials := 0; partials < 2; {
		entries, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		partials = 0
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".messagehub-backup-partial-") {
				partials++
			}
		}
		if partials < 2 {
			select {
			case err := <-answers:
				t.Fatalf("a backup answered before the first ended: %v", err)
			case <-waiting.Done():
				t.Fatal("the second backup made no folder")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	close(held.release)
	var codesOf []codes.Code
	for range 2 {
		err := <-answers
		codesOf = append(codesOf, status.Code(err))
		if err != nil && (status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "exists already")) {
			t.Errorf("the backup that lost the directory: %v; want INVALID_ARGUMENT saying it exists already", err)
		}
	}
	if !slices.Contains(codesOf, codes.OK) || !slices.Contains(codesOf, codes.InvalidArgument) {
		t.Fatalf("the two backups answered %v; want one OK and one INVALID_ARGUMENT", codesOf)
	}
	if _, err := os.Stat(filepath.Join(parent, "backup-1", "content")); err != nil {
		t.Fatalf("the backup kept: %v", err)
	}
}
