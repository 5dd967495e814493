// Package diskguard keeps a reserve of free space on the data volume, like
// etcd's space quota: while free space is below the reserve, saves are
// refused with a clear error, so that the store never meets a full disk.
// Reads and the small writes of Peek and Dequeue go on down to half the
// reserve, where every write is refused; saves resume by themselves once
// space is freed. A backup onto the data volume is held to the reserve
// like a save, as large as the data directory (backup.go).
//
// The volume is looked at every few seconds, not at every write, and a
// burst of saves or documents can fill it in between. So the guard counts
// what is written between two looks: every write takes its estimated bytes
// before it reaches the disk (Store and Documents do this), and is refused
// when the free space of the last look, less what was written since and
// what is being written, would fall below the reserve.
package diskguard

import (
	"cmp"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
)

// DefaultInterval is how often free space is looked at: a syscall per
// interval rather than per write, and what is written in between is
// counted.
const DefaultInterval = 2 * time.Second

// FreeFunc reports the bytes available to this process on dir's volume.
type FreeFunc func(dir string) (uint64, error)

// Guard watches the free space of one directory's volume. Below the
// reserve saves are refused; below half of it (the floor) every write is,
// for pebble panics when a write of its own meets a full disk (its commit
// pipeline cannot recover), and a panic is what the reserve is there to
// avoid. The floor is only reached when something else fills the volume.
type Guard struct {
	dir     string
	reserve uint64
	free    FreeFunc
	logger  *slog.Logger

	mu     sync.Mutex   // serialises looks, so state changes are logged once
	unread bool         // the last look failed (logged once, not every look)
	level  atomic.Int32 // LevelOK, LevelSavesRefused or LevelWritesRefused, as the last look measured
	// readOnly: the store was opened read-only (ReadOnlyAtStart), and every
	// write fails until a restart, whatever space the volume has.
	readOnly atomic.Bool

	// acct is the estimate of free space between looks: measured by the
	// last look, less written since (and not yet seen by a look) and less
	// inflight, taken by writes under way.
	acct struct {
		sync.Mutex
		measured uint64
		// looked: a look has measured the volume. Until one does, writes
		// pass: a guard that cannot see the disk does not stop them.
		looked   bool
		written  uint64
		inflight uint64
		// A refusal for what was written since the last look is logged
		// once an episode: refusedSinceLook keeps the episode going
		// across a look, logged says its line is out.
		refusedSinceLook, logged bool
	}

	stop chan struct{}
	done chan struct{}
}

// Levels of the guard, as Level reports them.
const (
	LevelOK            = iota // every write passes
	LevelSavesRefused         // below the reserve: saves are refused
	LevelWritesRefused        // below the floor: every write is refused
)

// volumeFree is what a guard given no FreeFunc reads: Free, the volume's
// own free space, but in a binary built for the end-to-end tests
// (fakefree.go).
var volumeFree FreeFunc = Free

// CheckReserve refuses a reserve that dir's volume can never have free: at
// or above the volume's size, every save would be refused for as long as
// the hub runs. A volume whose size cannot be read passes, as a guard that
// cannot see the disk stops nothing.
func CheckReserve(dir string, reserve uint64) error {
	size, err := Size(dir)
	if err != nil || reserve < size {
		return nil
	}
	return fmt.Errorf("--min-free-disk %s (%d bytes) is not below the size of the data volume of %s (%s, %d bytes): "+
		"the volume can never have that much free, so every save would be refused; set --min-free-disk below the "+
		"volume's size, or 0 to turn the guard off", FormatSize(reserve), reserve, dir, FormatSize(size), size)
}

// New checks dir's volume at once (logging if saves start refused) and then
// every interval until Close. free nil means the volume's real free space.
// The reserve is not checked against the volume's size: CheckReserve does.
func New(dir string, reserve uint64, free FreeFunc, interval time.Duration, logger *slog.Logger) *Guard {
	if free == nil {
		free = volumeFree
	}
	interval = cmp.Or(interval, DefaultInterval)
	logger = cmp.Or(logger, slog.New(slog.DiscardHandler))
	g := &Guard{dir: dir, reserve: reserve, free: free, logger: logger, stop: make(chan struct{}), done: make(chan struct{})}
	g.Refresh()
	go g.loop(interval)
	return g
}

func (g *Guard) loop(interval time.Duration) {
	defer close(g.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			g.Refresh()
		}
	}
}

// Close stops the watching.
func (g *Guard) Close() {
	close(g.stop)
	<-g.done
}

// Floor is the free space below which every write is refused: half the
// reserve.
func (g *Guard) Floor() uint64 { return g.reserve / 2 }

// Refresh looks at the free space now. A change of level is logged once. What
// was written before a look is in what it measured, so it is no longer
// counted; what is written while the volume is being read stays counted,
// perhaps twice until the next look. An error reading the free space leaves
// the last measure and keeps counting what is written since it (the estimate
// only goes down until a look succeeds); a guard that never read the disk
// does not stop saves.
func (g *Guard) Refresh() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.acct.Lock()
	before := g.acct.written
	g.acct.Unlock()
	avail, err := g.free(g.dir)
	g.acct.Lock()
	if err == nil {
		g.acct.written -= before
		g.acct.measured, g.acct.looked = avail, true
	}
	if !g.acct.refusedSinceLook {
		g.acct.logged = false
	}
	g.acct.refusedSinceLook = false
	g.acct.Unlock()
	if err != nil {
		if !g.unread {
			g.logger.Warn("cannot read the free space of the data volume; the guard keeps its last measure, less what "+
				"is written until a look succeeds", "dir", g.dir, "error", err)
		}
		g.unread = true
		return
	}
	if g.unread {
		g.logger.Info("the free space of the data volume can be read again", "dir", g.dir, "free_bytes", avail)
	}
	g.unread = false
	level := int32(LevelOK)
	switch {
	case avail < g.Floor():
		level = LevelWritesRefused
	case avail < g.reserve:
		level = LevelSavesRefused
	}
	was := g.level.Swap(level)
	if level == was {
		return
	}
	attrs := []any{"dir", g.dir, "free_bytes", avail, "min_free_bytes", g.reserve}
	switch {
	case level == LevelWritesRefused:
		g.logger.Error("every write is refused, peeks of new bundles and dequeues too: the data volume is almost full; "+
			"free space (saves are refused below --min-free-disk, every write below half of it)", attrs...)
	case g.readOnly.Load():
		g.logger.Error("every write is still refused: the data volume has more space now, but the store was opened "+
			"read-only as the volume was almost full at start; restart the hub", attrs...)
	case level == LevelSavesRefused:
		g.logger.Error("saves are refused: the data volume is nearly full; free space, or lower --min-free-disk; "+
			"peeks and dequeues go on", attrs...)
	default:
		g.logger.Info("saves resume: the data volume has space again", attrs...)
	}
}

// Level is what the last look found: LevelOK, LevelSavesRefused or
// LevelWritesRefused; always LevelWritesRefused once the store was opened
// read-only, which refuses every write until a restart.
func (g *Guard) Level() int {
	if g.readOnly.Load() {
		return LevelWritesRefused
	}
	return int(g.level.Load())
}

// Reserve is the free space the guard keeps (--min-free-disk).
func (g *Guard) Reserve() uint64 { return g.reserve }

// Available is the estimated free space now: the last look's measure less
// what was written since and what writes under way have taken.
func (g *Guard) Available() uint64 {
	g.acct.Lock()
	defer g.acct.Unlock()
	return g.available()
}

// available is Available with acct held.
func (g *Guard) available() uint64 {
	used := g.acct.written + g.acct.inflight
	if used >= g.acct.measured {
		return 0
	}
	return g.acct.measured - used
}

// Check returns an error wrapping domain.ErrStorageFull while the estimated
// free space is below the reserve: saves are refused.
func (g *Guard) Check() error {
	return g.take(0, g.reserve)
}

// CheckWrite returns an error wrapping domain.ErrStorageFull while the
// estimated free space is below the floor: no write may reach the store.
func (g *Guard) CheckWrite() error {
	return g.take(0, g.Floor())
}

// take counts n bytes as being written if the estimated free space stays at
// or above limit (the reserve or the floor) with them; else it returns the
// refusal and takes nothing. The caller gives them back with give.
func (g *Guard) take(n, limit uint64) error {
	g.acct.Lock()
	defer g.acct.Unlock()
	avail := g.available()
	if !g.acct.looked || avail >= limit && avail-limit >= n {
		g.acct.inflight += n
		return nil
	}
	pending := g.acct.written + g.acct.inflight
	if pending > 0 {
		g.acct.refusedSinceLook = true
		if !g.acct.logged {
			g.acct.logged = true
			g.logger.Warn("writes are refused: what was written since the last look at the data volume, with what is "+
				"being written, would leave less free space than it keeps (--min-free-disk for saves, half of it for "+
				"every write); the next look tells how much is really left",
				"dir", g.dir, "measured_free_bytes", g.acct.measured, "written_bytes", pending, "min_free_bytes", g.reserve)
		}
	}
	return g.refusal(g.acct.measured, avail, pending, n, limit)
}

// give gives back n bytes taken, counting them as written since the last
// look when wrote is set (they are on the volume until a look sees them).
func (g *Guard) give(n uint64, wrote bool) {
	g.acct.Lock()
	defer g.acct.Unlock()
	g.acct.inflight -= n
	if wrote {
		g.acct.written += n
	}
}

// refusal says why a write of n bytes is refused with avail estimated free:
// measured by the last look, less pending written or being written since.
func (g *Guard) refusal(measured, avail, pending, n, limit uint64) error {
	free := FormatSize(avail) + " free"
	if pending > 0 {
		free = fmt.Sprintf("about %s free (%s at the last look, less %s written or being written since)",
			FormatSize(avail), FormatSize(measured), FormatSize(pending))
	}
	if n > 0 {
		free += fmt.Sprintf(", and this write needs about %s more", FormatSize(n))
	}
	if limit >= g.reserve {
		return fmt.Errorf("%w: the data volume has %s, below the %s kept in reserve (--min-free-disk); "+
			"saves are refused until space is freed, peeks and dequeues go on",
			domain.ErrStorageFull, free, FormatSize(g.reserve))
	}
	return fmt.Errorf("%w: the data volume has %s, below half of --min-free-disk (%s); "+
		"every write is refused until space is freed, so that the store never meets a full disk",
		domain.ErrStorageFull, free, FormatSize(g.reserve))
}

// ReadOnlyAtStart says how a store opened now must be opened: nil for
// writing; below the floor, read-only, with this error (wrapping
// domain.ErrStorageFull) for every write, for a store's start-up writes
// would meet the full disk. Space freed later needs a restart to be used.
func (g *Guard) ReadOnlyAtStart() error {
	err := g.CheckWrite()
	g.readOnly.Store(err != nil)
	if err != nil {
		return fmt.Errorf("%w; the store was opened read-only, as the data volume was almost full at start: "+
			"restart the hub once space is freed", err)
	}
	return nil
}

// Room says whether n bytes may be written now, as a write that is not a
// save: nil while the estimated free space stays at or above the floor
// with them, and then they count as written until the next look.
func (g *Guard) Room(n uint64) error {
	if err := g.take(n, g.Floor()); err != nil {
		return err
	}
	g.give(n, true)
	return nil
}
