package hub

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/energydatahub/messagehub/internal/store"
)

// DefaultBellPoll is how often a hub reads the bells of the other instances
// sharing its store (Options.BellPoll): a Save through another instance
// wakes this one's waiting peeks within about this, plus the store's
// replication lag.
const DefaultBellPoll = 500 * time.Millisecond

const (
	// maxBellPoll is the slowest a failing read of the bells is tried
	// again: while it fails, waiting peeks re-check by themselves.
	maxBellPoll = 5 * time.Second
	// restartBellsAfter is how many reads of the bells may fail in a row
	// before the next starts over from the present.
	restartBellsAfter = 3
	// bellTimeout bounds one ring or read of the bells.
	bellTimeout = 10 * time.Second
	// lastRingTimeout bounds the ring of the last groups' recipients when
	// the hub closes.
	lastRingTimeout = 2 * time.Second
	// minRingInterval paces the rings: at most ten a second per instance,
	// for a tenth of a second of latency at most.
	minRingInterval = 100 * time.Millisecond
)

// Bell operations, the values BellErrors is called with.
const (
	BellRing = "ring"
	BellRead = "read"
)

// bell rings the store's bell for the recipients of this hub's committed
// saves (store.Coordination.RingBell) and follows the bells the other
// instances sharing the store ring (ReadBells), waking this hub's waiting
// peeks for their recipients. Rings are coalesced: while one is in flight,
// and for minRingInterval after it, the recipients of the groups committing
// meanwhile wait for the next, so that a busy hub rings ten times a second
// at most, not once per group.
type bell struct {
	store  store.Coordination
	wakes  *wakeups
	logger *slog.Logger
	errors func(op string)
	poll   time.Duration

	signal chan struct{} // capacity 1: recipients wait to be rung

	mu      sync.Mutex
	pending map[string]struct{}
	// following is set while the last read of the bells succeeded; lost is
	// closed when it stops being so.
	following bool
	lost      chan struct{}
	// failing says which operation's failure was logged, so that a streak
	// of them is logged once.
	failing map[string]bool
}

// startBells starts ringing and following the bells until ctx ends.
func (r *Hub) startBells(ctx context.Context) {
	b := &bell{
		store: r.store, wakes: r.wakes, logger: r.logger, errors: r.opts.BellErrors, poll: r.opts.BellPoll,
		signal: make(chan struct{}, 1), pending: make(map[string]struct{}), lost: make(chan struct{}),
		failing: make(map[string]bool),
	}
	if b.poll <= 0 {
		b.poll = DefaultBellPoll
	}
	if b.errors == nil {
		b.errors = func(string) {}
	}
	r.wakes.bell = b
	r.background.Add(2)
	go func() { defer r.background.Done(); b.ringLoop(ctx) }()
	go func() { defer r.background.Done(); b.followLoop(ctx) }()
}

// FollowingOthers reports whether a Save through another instance sharing
// the store wakes this hub's waiting peeks now (the hub reads their bells),
// and returns a channel that is closed when that stops. While it does not,
// a waiting peek must look again by itself. A store one process opens is
// followed from the first read on: nobody else saves.
func (r *Hub) FollowingOthers() (bool, <-chan struct{}) {
	b := r.wakes.bell
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.following, b.lost
}

// ring has the recipients rung.
func (b *bell) ring(recipients []string) {
	if len(recipients) == 0 {
		return
	}
	b.mu.Lock()
	for _, r := range recipients {
		b.pending[r] = struct{}{}
	}
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default: // a ring is due already; it takes these too
	}
}

func (b *bell) ringLoop(ctx context.Context) {
	last := func() {
		// Closing: the last groups' recipients are rung still, and those
		// of a ring that closing cut short.
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), lastRingTimeout)
		b.ringPending(c, context.Background())
		cancel()
	}
	pace := time.NewTimer(minRingInterval)
	pace.Stop()
	for {
		select {
		case <-ctx.Done():
			last()
			return
		case <-b.signal:
		}
		c, cancel := context.WithTimeout(ctx, bellTimeout)
		b.ringPending(c, ctx)
		cancel()
		// The recipients of the groups committing meanwhile wait for the
		// next ring: an instance rings at most once per minRingInterval,
		// however many groups commit.
		pace.Reset(minRingInterval)
		select {
		case <-ctx.Done():
			last()
			return
		case <-pace.C:
		}
	}
}

// ringPending rings for the recipients waiting to be rung. A bell that
// fails is not rung again: the peeks waiting on other instances find the
// notifications at their next look. One that fails as closing ends was
// cut short by the hub closing, not refused: its recipients wait for the
// last ring.
func (b *bell) ringPending(ctx, closing context.Context) {
	b.mu.Lock()
	recipients := slices.Collect(maps.Keys(b.pending))
	clear(b.pending)
	b.mu.Unlock()
	if len(recipients) == 0 {
		return
	}
	err := b.store.RingBell(ctx, recipients)
	if err != nil && closing.Err() != nil {
		b.mu.Lock()
		for _, r := range recipients {
			b.pending[r] = struct{}{}
		}
		b.mu.Unlock()
		return
	}
	b.report(BellRing, err)
}

func (b *bell) followLoop(ctx context.Context) {
	cursor := ""
	timer := time.NewTimer(0)
	defer timer.Stop()
	pause := b.poll
	failed := 0 // reads failed in a row
	// fromPresent says that the cursor is the empty one (the start, or
	// dropped after failed reads) and no read from the present has worked
	// since.
	fromPresent := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		// Low priority: a throttled read only delays wake-ups, which the
		// re-checks then make.
		c, cancel := context.WithTimeout(b.store.LowPriority(ctx), bellTimeout)
		recipients, next, err := b.store.ReadBells(c, cursor)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if next != "" || err == nil {
			cursor = next
		}
		b.wakes.wakeRecipients(recipients)
		if fromPresent && err == nil {
			// Read from the present, this read left out the bells rung
			// before it (since the hub started, or since the reads began
			// to fail): a peek that looked before it and waits after it,
			// with the following taken up, would wait for a bell that
			// never comes. Every waiter looks again, after the present.
			fromPresent = false
			b.wakes.wakeAll()
		}
		b.report(BellRead, err)
		b.setFollowing(err == nil)
		if err == nil {
			failed, pause = 0, b.poll
		} else {
			failed, pause = failed+1, min(2*pause, maxBellPoll)
			if failed >= restartBellsAfter {
				// The cursor may be what fails (a container made anew).
				// Starting over at the present misses the bells rung
				// meanwhile, but not their saves: every peek waiting now
				// re-checks by itself at least once after the following
				// takes up again.
				cursor, fromPresent = "", true
			}
		}
		timer.Reset(pause)
	}
}

// setFollowing records whether the bells are being read, closing lost when
// they stop being so.
func (b *bell) setFollowing(ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case ok && !b.following:
		b.following, b.lost = true, make(chan struct{})
	case !ok && b.following:
		b.following = false
		close(b.lost)
	}
}

// report counts a failed operation and logs the first of a streak of
// failures, and the recovery after one.
func (b *bell) report(op string, err error) {
	b.mu.Lock()
	was := b.failing[op]
	b.failing[op] = err != nil
	b.mu.Unlock()
	switch {
	case err != nil:
		b.errors(op)
		if was {
			return
		}
		if op == BellRead {
			b.logger.Warn("reading the other instances' bells failed: their saves wake no waiting peek here, which re-check by themselves until it works again", "err", err)
		} else {
			b.logger.Warn("ringing the bell for committed saves failed: peeks waiting on other instances find them at their next look", "err", err)
		}
	case was:
		b.logger.Info("the bells work again", "operation", op)
	}
}
