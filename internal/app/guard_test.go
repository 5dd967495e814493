package app

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/domain"
)

// Documents are new data on the store's volume: while saves are refused, so
// are new documents; stored ones are still served.
func TestNoNewDocumentWhileSavesAreRefused(t *testing.T) {
	dir := t.TempDir()
	docs, err := content.OpenDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = docs.Close() }()
	free := uint64(1 << 40)
	g := diskguard.New(dir, 1<<30, func(string) (uint64, error) { return free, nil }, time.Hour, nil)
	defer g.Close()
	guarded := diskguard.Documents(docs, g)
	ctx := context.Background()
	stored := content.Key{Recipient: "r", BundleID: "stored"}
	staged, err := guarded.Create(ctx, stored, "application/json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := staged.Write([]byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := staged.Commit(); err != nil {
		t.Fatal(err)
	}

	free = 1 << 20
	g.Refresh()
	if _, err := guarded.Create(ctx, content.Key{Recipient: "r", BundleID: "new"}, "application/json"); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("a new document on a nearly full volume: %v; want ErrStorageFull", err)
	}
	doc, err := guarded.Open(ctx, stored)
	if err != nil {
		t.Fatalf("a stored document on a nearly full volume: %v", err)
	}
	_ = doc.Body.Close()
}
