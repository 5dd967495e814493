// Package diskguard keeps a reserve of free space on the data volume, like
// etcd's space quota: while free space is below the reserve, saves are
// refused with a clear error, so that the store never meets a full disk.
// Reads and the small writes of Peek and Dequeue go on down to half the
// reserve, where every write is refused; saves resume by themselves once
// space is freed.
package diskguard

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
)

// DefaultInterval is how often free space is looked at: often enough that a
// burst of saves cannot eat much of a 1 GiB reserve in between, and a
// syscall per interval rather than per save.
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

	mu     sync.Mutex   // serialises checks, so state changes are logged once
	unread bool         // the last look failed (logged once, not every look)
	level  atomic.Int32 // levelOK, levelSavesRefused or levelWritesRefused
	avail  atomic.Uint64

	stop chan struct{}
	done chan struct{}
}

const (
	levelOK            = iota
	levelSavesRefused  // below the reserve
	levelWritesRefused // below the floor
)

// New checks dir's volume at once (logging if saves start refused) and then
// every interval until Close. free nil means the volume's real free space.
func New(dir string, reserve uint64, free FreeFunc, interval time.Duration, logger *slog.Logger) *Guard {
	if free == nil {
		free = Free
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
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

// Refresh looks at the free space now. A change of level is logged once; an
// error reading the free space leaves the last state (a guard that cannot
// see the disk does not stop saves).
func (g *Guard) Refresh() {
	g.mu.Lock()
	defer g.mu.Unlock()
	avail, err := g.free(g.dir)
	if err != nil {
		if !g.unread {
			g.logger.Warn("cannot read the free space of the data volume; the guard keeps its last state", "dir", g.dir, "error", err)
		}
		g.unread = true
		return
	}
	g.unread = false
	g.avail.Store(avail)
	level := int32(levelOK)
	switch {
	case avail < g.Floor():
		level = levelWritesRefused
	case avail < g.reserve:
		level = levelSavesRefused
	}
	was := g.level.Swap(level)
	if level == was {
		return
	}
	attrs := []any{"dir", g.dir, "free_bytes", avail, "min_free_bytes", g.reserve}
	switch level {
	case levelWritesRefused:
		g.logger.Error("every write is refused, peeks of new bundles and dequeues too: the data volume is almost full; "+
			"free space (saves are refused below --min-free-disk, every write below half of it)", attrs...)
	case levelSavesRefused:
		g.logger.Error("saves are refused: the data volume is nearly full; free space, or lower --min-free-disk; "+
			"peeks and dequeues go on", attrs...)
	default:
		g.logger.Info("saves resume: the data volume has space again", attrs...)
	}
}

// Check returns an error wrapping domain.ErrStorageFull while free space is
// below the reserve: saves are refused.
func (g *Guard) Check() error {
	if g.level.Load() == levelOK {
		return nil
	}
	return fmt.Errorf("%w: the data volume has %s free, below the %s kept in reserve (--min-free-disk); "+
		"saves are refused until space is freed, peeks and dequeues go on",
		domain.ErrStorageFull, FormatSize(g.avail.Load()), FormatSize(g.reserve))
}

// CheckWrite returns an error wrapping domain.ErrStorageFull while free
// space is below the floor: no write may reach the store.
func (g *Guard) CheckWrite() error {
	if g.level.Load() != levelWritesRefused {
		return nil
	}
	return fmt.Errorf("%w: the data volume has %s free, below half of --min-free-disk (%s); "+
		"every write is refused until space is freed, so that the store never meets a full disk",
		domain.ErrStorageFull, FormatSize(g.avail.Load()), FormatSize(g.reserve))
}
