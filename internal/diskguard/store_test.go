package diskguard_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// volume is a small data volume. On a machine where the test may mount a
// tmpfs it is a real 32 MiB filesystem that fill really fills; elsewhere it
// is a folder whose free space the test sets, so the guard's part is still
// tested.
type volume struct {
	dir        string
	free       diskguard.FreeFunc
	fill, drop func(t *testing.T)
}

const volumeSize = 32 << 20

func smallVolume(t *testing.T) volume {
	t.Helper()
	mnt := t.TempDir()
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", mnt).Run(); err == nil {
		t.Cleanup(func() {
			if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v %s", mnt, err, out)
			}
		})
		filler := filepath.Join(mnt, "filler")
		return volume{
			dir:  filepath.Join(mnt, "data"),
			free: diskguard.Free,
			fill: func(t *testing.T) {
				f, err := os.Create(filler)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				buf := make([]byte, 64<<10)
				for {
					if _, err := f.Write(buf); err != nil {
						return // the volume is full
					}
				}
			},
			drop: func(t *testing.T) {
				if err := os.Remove(filler); err != nil {
					t.Fatal(err)
				}
			},
		}
	}
	t.Log("cannot mount a tmpfs here: the volume's free space is simulated")
	var free atomic.Uint64
	free.Store(volumeSize)
	return volume{
		dir:  filepath.Join(mnt, "data"),
		free: func(string) (uint64, error) { return free.Load(), nil },
		fill: func(*testing.T) { free.Store(0) },
		drop: func(*testing.T) { free.Store(volumeSize) },
	}
}

// stack is the embedded store and the hub over it, with the guard
// wired as cmd/messagehub wires it.
type stack struct {
	store store.Store
	repo  *hub.Hub
}

// openGuarded opens the embedded store in dir as cmd/messagehub does:
// read-only below the floor, and behind the guard.
func openGuarded(dir string, g *diskguard.Guard) (store.Store, error) {
	st, err := pebble.OpenWith(dir, nil, pebble.Options{ReadOnly: g.ReadOnlyAtStart(), Room: g.Room})
	if err != nil {
		return nil, err
	}
	return diskguard.Store(st, g), nil
}

func openHub(t *testing.T, dir string, g *diskguard.Guard) stack {
	t.Helper()
	store, err := openGuarded(dir, g)
	if err != nil {
		t.Fatal(err)
	}
	return stack{store: store, repo: hub.New(store, hub.Options{}, nil)}
}

func (h stack) close(t *testing.T) {
	t.Helper()
	h.repo.Close()
	if err := h.store.Close(); err != nil {
		t.Fatal(err)
	}
}

func (h stack) save(ctx context.Context, _ *diskguard.Guard, recipient string) error {
	_, err := h.repo.Save(ctx, []domain.Notification{{
		ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges,
		ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: 1,
	}})
	return err
}

// A volume that something else fills to the last byte: saves, new bundles
// and dequeues are refused with ErrStorageFull instead of reaching pebble,
// which would panic; pending bundles are still served, across a restart on
// the full volume; once space is freed, everything resumes.
func TestAFullVolumeRefusesWritesWithoutAPanic(t *testing.T) {
	v := smallVolume(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := diskguard.New(v.dir, 8<<20, v.free, time.Hour, slog.New(slog.DiscardHandler))
	defer g.Close()
	if err := os.MkdirAll(v.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	h := openHub(t, v.dir, g)
	peeked, waiting := uuid.NewString(), uuid.NewString()
	for _, r := range []string{peeked, waiting} {
		if err := h.save(ctx, g, r); err != nil {
			t.Fatal(err)
		}
	}
	pending, err := h.repo.Peek(ctx, peeked, domain.GroupAll, "")
	if err != nil || pending == nil {
		t.Fatalf("peek before the volume filled: %v, %v", pending, err)
	}

	v.fill(t)
	g.Refresh()
	full := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, domain.ErrStorageFull) {
			t.Fatalf("%s on a full volume: %v; want ErrStorageFull", what, err)
		}
	}
	full("a save", h.save(ctx, g, waiting))
	_, err = h.repo.Peek(ctx, waiting, domain.GroupAll, "")
	full("a peek that makes a bundle", err)
	full("a dequeue", h.repo.Dequeue(ctx, peeked, pending.ID))
	again, err := h.repo.Peek(ctx, peeked, domain.GroupAll, "")
	if err != nil || again == nil || again.ID != pending.ID {
		t.Fatalf("peek of the pending bundle on a full volume: %v, %v; want %s", again, err, pending.ID)
	}

	h.close(t) // a restart on the full volume
	h = openHub(t, v.dir, g)
	if again, err = h.repo.Peek(ctx, peeked, domain.GroupAll, ""); err != nil || again == nil || again.ID != pending.ID {
		t.Fatalf("peek of the pending bundle after a restart on a full volume: %v, %v", again, err)
	}
	full("a dequeue after the restart", h.repo.Dequeue(ctx, peeked, pending.ID))

	v.drop(t)
	g.Refresh()
	if err := h.repo.Dequeue(ctx, peeked, pending.ID); !errors.Is(err, domain.ErrStorageFull) || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("a dequeue once space was freed, on a store opened read-only: %v; want ErrStorageFull asking for a restart", err)
	}
	h.close(t)
	h = openHub(t, v.dir, g)
	defer h.close(t)
	if err := h.repo.Dequeue(ctx, peeked, pending.ID); err != nil {
		t.Fatalf("dequeue once space was freed: %v", err)
	}
	if err := h.save(ctx, g, waiting); err != nil {
		t.Fatalf("save once space was freed: %v", err)
	}
	next, err := h.repo.Peek(ctx, waiting, domain.GroupAll, "")
	if err != nil || next == nil || len(next.NotificationIDs) != 2 {
		t.Fatalf("peek once space was freed: %+v, %v; want both saves of the recipient", next, err)
	}
}

// A store opened read-only (the volume below the floor at start) refuses
// every write until a restart, whatever space is freed: the guard's level
// says so, and its log asks for the restart. It said level 0 ("every write
// passes") and "saves resume" once space was freed, while every write was
// still refused.
func TestAStoreOpenedReadOnlyIsShownAsRefusingWritesUntilARestart(t *testing.T) {
	v := smallVolume(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var logs bytes.Buffer
	g := diskguard.New(v.dir, 8<<20, v.free, time.Hour, slog.New(slog.NewJSONHandler(&logs, nil)))
	defer g.Close()
	if err := os.MkdirAll(v.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	h := openHub(t, v.dir, g)
	h.close(t)
	v.fill(t)
	g.Refresh()
	h = openHub(t, v.dir, g) // a start on the full volume: read-only
	defer h.close(t)
	v.drop(t)
	g.Refresh()
	if err := h.save(ctx, g, uuid.NewString()); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("a save once space was freed, on a store opened read-only: %v; want ErrStorageFull", err)
	}
	if level := g.Level(); level != diskguard.LevelWritesRefused {
		t.Fatalf("level %d once space was freed, on a store opened read-only that refuses every write; want %d", level, diskguard.LevelWritesRefused)
	}
	if strings.Contains(logs.String(), "saves resume") || !strings.Contains(logs.String(), "restart the hub") {
		t.Fatalf("the log once space was freed, on a store opened read-only, does not ask for a restart:\n%s", logs.String())
	}
}

// A first start on an almost full volume has nothing to serve: it says so.
func TestAFirstStartOnAFullVolumeSaysWhy(t *testing.T) {
	g := diskguard.New(t.TempDir(), 1<<30, func(string) (uint64, error) { return 0, nil }, time.Hour, nil)
	defer g.Close()
	_, err := openGuarded(filepath.Join(t.TempDir(), "data"), g)
	if !errors.Is(err, domain.ErrStorageFull) || !strings.Contains(err.Error(), "no store there yet") {
		t.Fatalf("a first start on a full volume: %v", err)
	}
}

// realVolume mounts a tmpfs of size bytes, or skips the test: what it
// checks is that real writes never meet a full disk.
func realVolume(t *testing.T, size uint64) string {
	t.Helper()
	return tmpfsVolume(t, "size="+strconv.FormatUint(size, 10))
}

// tmpfsVolume mounts a tmpfs with the mount options, or skips the test.
func tmpfsVolume(t *testing.T, options string) string {
	t.Helper()
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", options, "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v %s): the guard's counting is tested in guarded_test.go", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
		}
	})
	return mnt
}

// The hub's own saves, between two looks of the guard, cannot take a small
// volume to a full disk: they are refused once their estimated bytes would
// cross the reserve, and every look lets through what really fits, until
// the volume itself is down to the reserve.
func TestTheHubsOwnSavesCannotFillTheVolume(t *testing.T) {
	mnt := realVolume(t, 64<<20)
	g := diskguard.New(mnt, 24<<20, nil, time.Hour, nil)
	defer g.Close()
	h := openHub(t, filepath.Join(mnt, "data"), g)
	recipient := uuid.NewString()
	saved := 0
	// Saves go on until one is refused; then the guard looks, and saves go
	// on while it finds room. A refusal right after a look ends it.
	for looked := false; ; {
		if saved > 10_000_000 {
			t.Fatal("saves are never refused")
		}
		ns := make([]domain.Notification, 1000)
		for i := range ns {
			ns[i] = domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges,
				ContentType: "c", DocumentType: "d", SupportsBundling: true, Weight: 1}
		}
		// Some 350 saves run: a guard against a hang for each, not a time
		// for them all, which a busy machine would exceed.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, err := h.repo.Save(ctx, ns)
		cancel()
		if err == nil {
			saved += len(ns)
			looked = false
			continue
		}
		if !errors.Is(err, domain.ErrStorageFull) {
			t.Fatalf("a save after %d notifications: %v", saved, err)
		}
		if looked {
			break
		}
		g.Refresh()
		looked = true
	}
	free, _ := diskguard.Free(mnt)
	t.Logf("%d notifications saved, %d bytes free", saved, free)
	if saved == 0 || free < 12<<20 {
		t.Fatalf("%d notifications saved, %d bytes free; want some saved, and the floor kept", saved, free)
	}
	h.close(t)
}

// Documents built at once, 50 MiB each as providers may answer, cannot take
// the volume to a full disk between two looks either.
func TestDocumentsBuiltAtOnceCannotFillTheVolume(t *testing.T) {
	mnt := realVolume(t, 64<<20)
	g := diskguard.New(mnt, 16<<20, nil, time.Hour, nil)
	defer g.Close()
	dir, err := content.OpenDirStore(filepath.Join(mnt, "content"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dir.Close() }()
	docs := diskguard.Documents(dir, g)
	ctx := context.Background()
	const builds, chunk = 6, 1 << 20
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		stored, refused int
	)
	for b := range builds {
		wg.Go(func() {
			doc, err := docs.Create(ctx, content.Key{Recipient: "r", BundleID: strconv.Itoa(b)}, "application/xml")
			if err == nil {
				defer doc.Abort()
				buf := make([]byte, chunk)
				for i := 0; i < content.MaxDocumentBytes/chunk && err == nil; i++ {
					_, err = doc.Write(buf)
				}
			}
			if err == nil {
				err = doc.Commit()
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				stored++
			case errors.Is(err, domain.ErrStorageFull):
				refused++
			default:
				t.Errorf("a document: %v", err)
			}
		})
	}
	wg.Wait()
	free, _ := diskguard.Free(mnt)
	if refused == 0 || free < 16<<20 {
		t.Fatalf("%d documents stored, %d refused, %d bytes left free; want the rest refused above the 16 MiB reserve", stored, refused, free)
	}
}
