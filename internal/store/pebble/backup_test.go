package pebble_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
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
	s, err := pebble.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	repo := hub.New(s, hub.Options{}, nil)
	ctx := context.Background()
	n := domain.Notification{ID: uuid.NewString(), Recipient: uuid.NewString(), Origin: domain.OriginCharges,
		ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: 1}
	if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
		t.Fatal(err)
	}
	repo.Close()
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
