package pebble_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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
