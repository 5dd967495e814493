package diskguard_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/domain"
)

// A backup onto the data volume is held to the reserve as if it were as
// large as the data directory (it comes to be, as compactions replace the
// tables it links); while the volume has room for that, it is written.
func TestABackupOntoTheDataVolumeNeedsRoomForTheDataDirectory(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	backupNeedsRoom(t, parent, dir, dir)
}

// A data directory reached through a symbolic link (a volume mounted
// elsewhere and linked into place) is as large as what it holds: a backup
// onto its volume is held to the reserve by that size, not passed as if
// the directory were empty.
func TestABackupOfADataDirectoryReachedThroughALinkNeedsRoomForIt(t *testing.T) {
	parent := t.TempDir()
	real := filepath.Join(parent, "volume", "data")
	if err := os.MkdirAll(real, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "data")
	if err := os.Symlink(real, dir); err != nil {
		t.Fatal(err)
	}
	backupNeedsRoom(t, parent, dir, real)
}

// backupNeedsRoom opens a hub in dir (the folder real, or a link to it),
// saves into it, and backs it up into parent: refused while the volume
// has room for the reserve but not for what real holds, written once it
// has room for both.
func backupNeedsRoom(t *testing.T, parent, dir, real string) {
	t.Helper()
	const reserve = 1 << 20
	var free atomic.Uint64
	free.Store(1 << 30)
	g := diskguard.New(dir, reserve, func(string) (uint64, error) { return free.Load(), nil }, time.Hour, slog.New(slog.DiscardHandler))
	defer g.Close()
	h := openHub(t, dir, g)
	defer h.close(t)
	ctx := context.Background()
	for range 20 {
		if err := h.save(ctx, g, uuid.NewString()); err != nil {
			t.Fatal(err)
		}
	}
	size, err := diskguard.DirBytes(real)
	if err != nil {
		t.Fatal(err)
	}

	// Room for the reserve and less than the data directory: refused.
	free.Store(reserve + size/2)
	g.Refresh()
	refused := filepath.Join(parent, "refused")
	if err := h.store.Backup(ctx, refused); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("a backup that would eat into the reserve: %v; want ErrStorageFull", err)
	}
	if _, err := os.Stat(refused); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused backup left %s (%v)", refused, err)
	}
	// Room for both: written, and saves go on as before.
	free.Store(reserve + 2*size)
	g.Refresh()
	if err := h.store.Backup(ctx, filepath.Join(parent, "written")); err != nil {
		t.Fatal(err)
	}
	if err := h.save(ctx, g, uuid.NewString()); err != nil {
		t.Fatalf("a save after the backup: %v", err)
	}
}

// A backup onto another volume costs the data volume nothing: it is
// written even when the data volume has no room beyond its reserve.
func TestABackupOntoAnotherVolumeIsNotHeldToTheReserve(t *testing.T) {
	other := t.TempDir()
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", other).Run(); err != nil {
		t.Skip("cannot mount a tmpfs here for a second volume")
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", other).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", other, err, out)
		}
	})
	dir := filepath.Join(t.TempDir(), "data")
	const reserve = 1 << 20
	g := diskguard.New(dir, reserve, func(string) (uint64, error) { return reserve, nil }, time.Hour, slog.New(slog.DiscardHandler))
	defer g.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	h := openHub(t, dir, g)
	defer h.close(t)
	if same, err := diskguard.SameVolume(dir, other); err != nil || same {
		t.Fatalf("SameVolume(%s, the tmpfs) = %v, %v", dir, same, err)
	}
	if err := h.store.Backup(context.Background(), filepath.Join(other, "backup")); err != nil {
		t.Fatalf("a backup onto another volume: %v", err)
	}
}
