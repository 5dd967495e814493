package diskguard

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
)

// volume is a data volume whose free space the test sets.
type volume struct {
	free atomic.Uint64
	fail atomic.Bool
}

func (v *volume) read(string) (uint64, error) {
	if v.fail.Load() {
		return 0, errors.New("statfs: no such device")
	}
	return v.free.Load(), nil
}

func TestSavesAreRefusedBelowTheReserveAndResumeOnTheirOwn(t *testing.T) {
	var logs bytes.Buffer
	v := &volume{}
	v.free.Store(100 << 20) // starts full: 100 MiB free, 1 GiB kept in reserve
	g := New("/data", 1<<30, v.read, time.Hour, slog.New(slog.NewJSONHandler(&logs, nil)))
	defer g.Close()

	err := g.Check()
	if !errors.Is(err, domain.ErrStorageFull) || !strings.Contains(err.Error(), "100.0MiB free") || !strings.Contains(err.Error(), "1.0GiB") {
		t.Fatalf("a start on a nearly full volume: %v", err)
	}
	if !strings.Contains(logs.String(), "saves are refused") {
		t.Fatalf("a start on a full volume does not say why saves are refused: %s", logs.String())
	}
	for range 100 { // checks while full do not log again
		g.Refresh()
		_ = g.Check()
	}
	if n := strings.Count(logs.String(), "\n"); n != 1 {
		t.Fatalf("%d log lines while the volume stayed full, want 1:\n%s", n, logs.String())
	}

	v.free.Store(5 << 30)
	g.Refresh()
	if err := g.Check(); err != nil {
		t.Fatalf("after space was freed: %v", err)
	}
	if !strings.Contains(logs.String(), "saves resume") {
		t.Fatalf("resuming is not logged: %s", logs.String())
	}

	v.fail.Store(true) // a volume that cannot be read keeps the last state
	logs.Reset()
	for range 10 {
		g.Refresh()
	}
	if err := g.Check(); err != nil {
		t.Fatalf("an unreadable volume stopped saves: %v", err)
	}
	if n := strings.Count(logs.String(), "cannot read the free space"); n != 1 {
		t.Fatalf("%d log lines for 10 failed looks, want 1:\n%s", n, logs.String())
	}
}

// A guard that cannot read the volume does not stop saves, also when it
// never could: its first look failing left it measuring 0 bytes free, and
// every save and write was refused while its level said they pass.
func TestAGuardThatNeverReadTheVolumeDoesNotStopWrites(t *testing.T) {
	var logs bytes.Buffer
	v := &volume{}
	v.fail.Store(true)
	g := New("/data", 1<<30, v.read, time.Hour, slog.New(slog.NewJSONHandler(&logs, nil)))
	defer g.Close()
	if err := g.Check(); err != nil {
		t.Fatalf("a save with the volume never read: %v", err)
	}
	if err := g.CheckWrite(); err != nil {
		t.Fatalf("a write with the volume never read: %v", err)
	}
	if g.Level() != LevelOK || !strings.Contains(logs.String(), "cannot read the free space") {
		t.Fatalf("level %d, log %s; want %d and the failed look", g.Level(), logs.String(), LevelOK)
	}
	v.free.Store(100 << 20) // once it reads the volume, it keeps the reserve
	v.fail.Store(false)
	g.Refresh()
	if err := g.Check(); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("a save with 100 MiB free of a 1 GiB reserve: %v", err)
	}
}

func TestBelowHalfTheReserveEveryWriteIsRefused(t *testing.T) {
	var logs bytes.Buffer
	v := &volume{}
	v.free.Store(600 << 20)
	g := New("/data", 1<<30, v.read, time.Hour, slog.New(slog.NewJSONHandler(&logs, nil)))
	defer g.Close()
	if err := g.Check(); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("saves with 600 MiB of a 1 GiB reserve free: %v", err)
	}
	if err := g.CheckWrite(); err != nil {
		t.Fatalf("peeks and dequeues with 600 MiB of a 1 GiB reserve free: %v", err)
	}

	v.free.Store(100 << 20)
	g.Refresh()
	err := g.CheckWrite()
	if !errors.Is(err, domain.ErrStorageFull) || !strings.Contains(err.Error(), "every write is refused") {
		t.Fatalf("writes with 100 MiB of a 1 GiB reserve free: %v", err)
	}
	if !strings.Contains(logs.String(), "every write is refused") {
		t.Fatalf("refusing every write is not logged: %s", logs.String())
	}

	v.free.Store(700 << 20)
	g.Refresh()
	if g.CheckWrite() != nil || g.Check() == nil {
		t.Fatalf("with 700 MiB free again: writes %v, saves %v; want writes only", g.CheckWrite(), g.Check())
	}
	if n := strings.Count(logs.String(), "\n"); n != 3 {
		t.Fatalf("%d log lines for three changes of level, want 3:\n%s", n, logs.String())
	}
}

func TestTheGuardLooksAgainByItself(t *testing.T) {
	v := &volume{}
	v.free.Store(1 << 40)
	checked := make(chan struct{}, 1)
	g := New("/data", 1<<30, func(dir string) (uint64, error) {
		select {
		case checked <- struct{}{}:
		default:
		}
		return v.read(dir)
	}, time.Millisecond, nil)
	defer g.Close()
	<-checked // the check at start
	v.free.Store(1)
	for g.Check() == nil { // bounded by the test's timeout; each loop waits for a check
		<-checked
	}
	if err := g.Check(); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("got %v", err)
	}
}

func TestTheRealVolumeCanBeRead(t *testing.T) {
	free, err := Free(t.TempDir())
	if err != nil || free == 0 {
		t.Fatalf("free space of the test's volume: %d, %v", free, err)
	}
}

func TestAFolderNotMadeYetIsOnItsParentsVolume(t *testing.T) {
	free, err := Free(t.TempDir() + "/data/not/made")
	if err != nil || free == 0 {
		t.Fatalf("free space for a folder not made yet: %d, %v", free, err)
	}
}

// A reserve the volume can never have free, its size or more, is refused
// with a message naming the flag, the value and the volume's size; a byte
// less fits.
func TestAReserveAsLargeAsTheVolumeIsRefused(t *testing.T) {
	dir := t.TempDir() + "/data/not/made"
	size, err := Size(dir)
	if err != nil || size == 0 {
		t.Fatalf("size of the test's volume: %d, %v", size, err)
	}
	if free, err := Free(dir); err != nil || free > size {
		t.Fatalf("%d bytes free on a volume of %d: %v", free, size, err)
	}
	if err := CheckReserve(dir, size-1); err != nil {
		t.Fatalf("a reserve a byte below the volume's size: %v", err)
	}
	for _, reserve := range []uint64{size, size + 1, math.MaxUint64} {
		err := CheckReserve(dir, reserve)
		if err == nil {
			t.Fatalf("a reserve of %d on a volume of %d passes", reserve, size)
		}
		for _, want := range []string{"--min-free-disk " + FormatSize(reserve), fmt.Sprintf("(%d bytes)", reserve),
			fmt.Sprintf("(%s, %d bytes)", FormatSize(size), size), dir} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("its message does not say %q: %v", want, err)
			}
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{
		"0": 0, "1": 1, "512B": 512, "1KB": 1000, "1kib": 1024, "2MiB": 2 << 20, "1GiB": 1 << 30,
		"1 GB": 1e9, "512MiB": 512 << 20, "1GB": 1e9, "3TiB": 3 << 40, "10MB": 10e6,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "GiB", "-1GiB", "1.5GiB", "1 parsec", "99999999999TiB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted it", bad)
		}
	}
}

// A look that fails keeps what was written since the last good look
// counted: the guard's estimate only goes down until a look succeeds, so
// writes that ate into the reserve are not let through again by a volume
// that cannot be read.
func TestAFailedLookKeepsWhatWasWrittenCounted(t *testing.T) {
	var logs bytes.Buffer
	v := &volume{}
	v.free.Store(100 << 20)
	g := New("/data", 40<<20, v.read, time.Hour, slog.New(slog.NewJSONHandler(&logs, nil)))
	defer g.Close()
	if err := g.Room(70 << 20); err != nil {
		t.Fatalf("70 MiB written on 100 MiB free with a 40 MiB reserve: %v", err)
	}
	if err := g.Check(); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("a save with about 30 MiB left of a 40 MiB reserve: %v", err)
	}
	v.fail.Store(true)
	g.Refresh()
	if err := g.Check(); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("a save after a failed look, with about 30 MiB left of a 40 MiB reserve: %v", err)
	}
	if got := g.Available(); got != 30<<20 {
		t.Fatalf("estimated free space after a failed look: %d, want %d", got, 30<<20)
	}
	if !strings.Contains(logs.String(), "cannot read the free space") {
		t.Fatalf("the failed look is not logged: %s", logs.String())
	}
	v.fail.Store(false) // a good look counts from what it sees
	v.free.Store(500 << 20)
	g.Refresh()
	if err := g.Check(); err != nil || g.Available() != 500<<20 {
		t.Fatalf("after a good look with 500 MiB free: %v, %d available", err, g.Available())
	}
	if !strings.Contains(logs.String(), "can be read again") {
		t.Fatalf("the good look after a failed one is not logged: %s", logs.String())
	}
}
