package pebble_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// A store opened read-only (a full data volume at start) is backed up too,
// with its saved id index, which a store opened on the copy loads rather
// than indexing the stored ids again; a store closed is not backed up.
func TestAReadOnlyStoreIsBackedUpWithItsIDIndex(t *testing.T) {
	dir := t.TempDir()
	s, n := storeWithASave(t, dir)
	ctx := context.Background()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	ro, err := pebble.OpenWith(dir, nil, pebble.Options{ReadOnly: errors.New("read-only for the test")})
	if err != nil {
		t.Fatal(err)
	}
	copyDir := filepath.Join(t.TempDir(), "copy")
	if err := ro.Backup(ctx, copyDir); err != nil {
		t.Fatalf("backup of a read-only store: %v", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ro.Backup(ctx, filepath.Join(t.TempDir(), "late")); !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("backup of a closed store: %v; want ErrUnavailable", err)
	}

	var logs bytes.Buffer
	copied, err := pebble.Open(copyDir, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = copied.Close() }()
	if !strings.Contains(logs.String(), "stored ids loaded") {
		t.Errorf("the copy did not load the saved id index:\n%s", logs.String())
	}
	found, err := copied.LookupIDs(ctx, []string{n.ID})
	if err != nil || len(found) != 1 {
		t.Fatalf("the copy knows %v (%v); want the saved id", found, err)
	}
}

// A backup copied into the data directory rather than as it (cp -a BACKUP
// data with data made already, or a backup copied into a new volume that is
// then mounted as the data directory) leaves no store in the data
// directory, and one in a folder of it: the store is not created afresh
// beside it, to serve nothing while the backup sits unused, but refused
// with a message naming the folder.
func TestAStoreIsNotCreatedBesideABackupCopiedIntoItsFolder(t *testing.T) {
	parent := t.TempDir()
	s, _ := storeWithASave(t, filepath.Join(parent, "old"))
	backup := filepath.Join(parent, "backup-1")
	if err := s.Backup(context.Background(), backup); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(parent, "data")
	if err := os.Mkdir(data, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(backup, filepath.Join(data, "backup-1")); err != nil {
		t.Fatal(err)
	}

	opened, err := pebble.Open(data, nil)
	if err == nil {
		_ = opened.Close()
		t.Fatal("a new store was created in a data directory holding a backup in a folder; want it refused")
	}
	if !strings.Contains(err.Error(), "backup-1") {
		t.Fatalf("refused with %q; want it to name the folder holding a store", err)
	}
	if manifests, _ := filepath.Glob(filepath.Join(data, "MANIFEST-*")); len(manifests) > 0 {
		t.Fatalf("the refused open created a store in %s: %v", data, manifests)
	}
}

// storeWithASave opens a store in dir and saves a notification into it.
func storeWithASave(t *testing.T, dir string) (*pebble.Store, domain.Notification) {
	t.Helper()
	s, err := pebble.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	repo := hub.New(s, hub.Options{}, nil)
	defer repo.Close()
	n := domain.Notification{ID: uuid.NewString(), Recipient: uuid.NewString(), Origin: domain.OriginCharges,
		ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: 1}
	if _, err := repo.Save(context.Background(), []domain.Notification{n}); err != nil {
		t.Fatal(err)
	}
	return s, n
}

// A backup onto a full volume fails, and leaves no file open on that
// volume: pebble's checkpoint leaves open the copy of its options file
// when writing it fails, which would keep a descriptor and the file's
// space on the backup volume (and that volume from being unmounted) for
// as long as the hub runs, one more per backup tried.
func TestABackupOntoAFullVolumeLeavesNoFileOpenOnIt(t *testing.T) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v %s)", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
			_ = exec.Command("umount", "-l", mnt).Run()
		}
	})
	for i := 0; ; i++ { // something else fills the backup volume
		if err := os.WriteFile(filepath.Join(mnt, strconv.Itoa(i)), make([]byte, 4096), 0o600); err != nil {
			break
		}
	}
	s, _ := storeWithASave(t, t.TempDir())
	defer func() { _ = s.Close() }()
	for i := range 3 {
		if err := s.Backup(context.Background(), filepath.Join(mnt, "backup"+strconv.Itoa(i))); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("a backup onto a full volume: %v; want ENOSPC", err)
		}
	}
	if open := openFilesUnder(t, mnt); len(open) > 0 {
		t.Fatalf("failed backups left open on the backup volume: %v", open)
	}
}

// openFilesUnder lists the files under dir this process holds open.
func openFilesUnder(t *testing.T, dir string) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot list this process's open files: %v", err)
	}
	var open []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			open = append(open, target)
		}
	}
	return open
}

// A backup directory inside the data directory is refused also when it is
// named through another mount of the data directory's volume folder (a
// bind mount, a container's second volume on a folder of the data
// directory): the copy would be part of what it copies.
func TestABackupInsideTheDataDirectoryThroughABindMountIsRefused(t *testing.T) {
	dir := t.TempDir()
	s, _ := storeWithASave(t, dir)
	defer func() { _ = s.Close() }()
	other := t.TempDir()
	if out, err := exec.Command("mount", "--bind", dir, other).CombinedOutput(); err != nil {
		t.Skipf("cannot bind-mount here (%v %s)", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", other).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", other, err, out)
		}
	})
	err := s.Backup(context.Background(), filepath.Join(other, "backup"))
	if !errors.Is(err, domain.ErrInvalidArgument) || !strings.Contains(err.Error(), "inside the data directory") {
		t.Fatalf("a backup into the data directory through a bind mount: %v; want it refused as inside the data directory", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "backup")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused backup wrote into the data directory (%v)", err)
	}
}

// A backup onto a volume that runs out of inodes fails at whichever file
// of the checkpoint it is at, and leaves no file or folder open on that
// volume at any of them (pebble's checkpoint leaves its folder open when
// it cannot make the marker files naming the format and the manifest).
func TestABackupCutShortByAVolumeOutOfInodesLeavesNoFileOpenOnIt(t *testing.T) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m,nr_inodes=64", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v %s)", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
			_ = exec.Command("umount", "-l", mnt).Run()
		}
	})
	s, _ := storeWithASave(t, t.TempDir())
	defer func() { _ = s.Close() }()
	fill := filepath.Join(mnt, "fill")
	if err := os.Mkdir(fill, 0o750); err != nil {
		t.Fatal(err)
	}
	var filled []string
	for i := 0; ; i++ { // something else takes every inode
		p := filepath.Join(fill, strconv.Itoa(i))
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			break
		}
		filled = append(filled, p)
	}
	for free := 1; free <= 12; free++ { // each time one more inode to spare
		if err := os.Remove(filled[len(filled)-1]); err != nil {
			t.Fatal(err)
		}
		filled = filled[:len(filled)-1]
		dir := filepath.Join(mnt, "backup"+strconv.Itoa(free))
		err := s.Backup(context.Background(), dir)
		if open := openFilesUnder(t, mnt); len(open) > 0 {
			t.Fatalf("a backup with %d inodes to spare (%v) left open on the backup volume: %v", free, err, open)
		}
		if err == nil {
			return // a whole backup fits: every point of failure before it was passed
		}
		_ = os.RemoveAll(dir)
	}
	t.Fatal("no backup fitted in 12 inodes")
}
