package diskguard_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/domain"
)

// A volume whose files (inodes) are all taken is full however many bytes
// it has free: pebble cannot create the table its start-up flush writes,
// and retries forever, so a hub restarted on it would never serve. The
// guard refuses writes on it as on a volume without free bytes, and a
// restart opens the store read-only and serves the pending bundle.
func TestAVolumeOutOfInodesIsAFullVolume(t *testing.T) {
	mnt := tmpfsVolume(t, "size=64m,nr_inodes=200")
	dir := filepath.Join(mnt, "data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	g := diskguard.New(dir, 8<<20, diskguard.Free, time.Hour, slog.New(slog.DiscardHandler))
	defer g.Close()
	ctx := context.Background()
	// Closed before the volume is unmounted, also when the test fails.
	var h stack
	running := false
	open := func() { h, running = openHub(t, dir, g), true }
	restart := func() { h.close(t); running = false; open() }
	t.Cleanup(func() {
		if running {
			h.close(t)
		}
	})
	open()
	r := uuid.NewString()
	if err := h.save(ctx, g, r); err != nil {
		t.Fatal(err)
	}
	pending, err := h.repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || pending == nil {
		t.Fatalf("peek: %v, %v", pending, err)
	}

	// Something else takes every file the volume has left.
	filler := filepath.Join(mnt, "filler")
	if err := os.Mkdir(filler, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		f, err := os.Create(filepath.Join(filler, strconv.Itoa(i)))
		if err != nil {
			break // no inode left
		}
		_ = f.Close()
	}
	g.Refresh()
	if err := h.save(ctx, g, r); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("a save on a volume out of inodes: %v; want ErrStorageFull", err)
	}
	if err := h.repo.Dequeue(ctx, r, pending.ID); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("a dequeue on a volume out of inodes: %v; want ErrStorageFull", err)
	}

	restart() // on the volume out of inodes
	if again, err := h.repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || again == nil || again.ID != pending.ID {
		t.Fatalf("peek of the pending bundle after a restart on a volume out of inodes: %v, %v", again, err)
	}

	if err := os.RemoveAll(filler); err != nil {
		t.Fatal(err)
	}
	g.Refresh()
	restart()
	if err := h.repo.Dequeue(ctx, r, pending.ID); err != nil {
		t.Fatalf("dequeue once files were freed: %v", err)
	}
}
