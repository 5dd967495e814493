// Package hub is MessageHub's algorithm over the store contract
// (internal/store): Save (save.go, a group commit), Peek (peek.go, cutting
// bundles by the bundling rule), Dequeue (dequeue.go), retention
// (sweep.go) and the wake-up of peeks waiting for a Save (wake.go, and
// bells.go for Saves through other instances sharing the store). It knows
// no backend: internal/store/storetest runs it over each one.
package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/groupcommit"
	"github.com/energydatahub/messagehub/internal/store"
)

const (
	defaultRetention = 7 * 24 * time.Hour
	// maxAttempts bounds the reload-and-retry loop after ErrConflict.
	maxAttempts = 20
	// opTimeout bounds work that is shared between callers (a group commit,
	// a coalesced peek), so that no single caller's cancellation aborts it.
	opTimeout = 30 * time.Second
	// maxSaveTimeout bounds a group commit whose callers allow it more than
	// opTimeout (groupDeadline).
	maxSaveTimeout = 2 * time.Minute
)

// Hub is MessageHub's core: Save, Peek and Dequeue over a store.Store.
type Hub struct {
	store  store.Store
	opts   Options
	logger *slog.Logger

	peeks *sharer[*domain.Bundle]
	// wakes wakes waiting peeks when a Save for their recipient commits
	// (wake.go).
	wakes *wakeups
	// idle decides when a Peek marks its recipient idle (idle.go).
	idle *idleMarks

	// closeMu guards starting work against Close: once closed is set no
	// operation starts, so Close can wait for every one that did.
	closeMu sync.RWMutex
	closed  bool
	// saves is the group committer of Save (save.go).
	saves *groupcommit.Pipeline[*saveCall]
	// ops counts running calls and the shared executions they started;
	// stopOps cancels the shared executions (their callers are gone by the
	// time Close runs).
	ops     sync.WaitGroup
	opsCtx  context.Context
	stopOps context.CancelFunc

	stopSweeper context.CancelFunc
	background  sync.WaitGroup
	// sweeping holds the one retention pass of this hub that runs
	// (sweep.go).
	sweeping chan struct{}
	// stuck counts the visits in a row of retention that failed, per
	// recipient (sweep.go).
	stuck stuckSweeps
	// revisits holds the recipients a later pass comes back to (sweep.go).
	revisits revisits
}

// New starts a Repository over store. Close stops its background work; the
// caller closes the store afterwards.
func New(store store.Store, opts Options, logger *slog.Logger) *Hub {
	if opts.MaxBundleWeight <= 0 {
		opts.MaxBundleWeight = domain.DefaultMaxBundleWeight
	}
	if opts.Retention <= 0 {
		opts.Retention = defaultRetention
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = min(opts.Retention/4, 10*time.Minute)
	}
	if opts.MaxCabinetDrawers <= 0 {
		opts.MaxCabinetDrawers = catalog.MaxDrawers
	}
	if opts.MaxAcknowledgeBundles <= 0 {
		opts.MaxAcknowledgeBundles = DefaultMaxAcknowledgeBundles
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewID == nil {
		opts.NewID = func() string { return uuid.NewString() }
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Hub{
		store: store, opts: opts, logger: logger,
		peeks: newSharer[*domain.Bundle](),
		wakes: newWakeups(opts.MaxWaitersPerRecipient, opts.MaxWaiters),
		idle:  newIdleMarks(),

		sweeping: make(chan struct{}, 1),
	}
	r.saves = r.newSaver()
	r.opsCtx, r.stopOps = context.WithCancel(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	r.stopSweeper = cancel
	r.background.Add(1)
	go func() { defer r.background.Done(); r.sweepLoop(ctx) }()
	r.startBells(ctx)
	return r
}

// Close wakes waiting peeks, refuses new calls, lets queued saves commit,
// cancels shared peek executions, stops the sweeper and waits for all of
// it, so that the caller can close the store afterwards with nothing still
// using it.
func (r *Hub) Close() {
	r.StopWaits()
	r.closeMu.Lock()
	r.closed = true
	r.closeMu.Unlock()
	r.saves.Close()
	r.stopSweeper()
	r.stopOps()
	r.ops.Wait()
	r.background.Wait()
}

// errClosed answers calls that arrive after Close.
var errClosed = fmt.Errorf("%w: shutting down", domain.ErrUnavailable)

// begin registers a call with Close; the caller must call r.ops.Done when
// it ends. It fails once Close has begun.
func (r *Hub) begin() error {
	r.closeMu.RLock()
	defer r.closeMu.RUnlock()
	if r.closed {
		return errClosed
	}
	r.ops.Add(1)
	return nil
}

// spawn runs fn in a goroutine that Close waits for. It is only called by a
// running operation, so the count is above zero and Close cannot have
// started waiting.
func (r *Hub) spawn(fn func()) {
	r.ops.Add(1)
	go func() {
		defer r.ops.Done()
		fn()
	}()
}

// retry runs op until it succeeds, fails with something other than
// ErrConflict, or runs out of attempts. Conflicts are other writers winning a
// race (or a lagging read); a random pause, whose ceiling doubles with each
// attempt up to 100 ms, lets them finish without spinning.
func retry[T any](ctx context.Context, op func() (T, error)) (T, error) {
	var zero T
	for attempt := range maxAttempts {
		v, err := op()
		if !errors.Is(err, store.ErrConflict) {
			return v, err
		}
		ceiling := min(time.Millisecond<<attempt, 100*time.Millisecond)
		pause := time.Duration(rand.Int64N(int64(ceiling))) + 50*time.Microsecond
		select {
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-time.After(pause):
		}
	}
	return zero, fmt.Errorf("%w: too much contention, try again", domain.ErrUnavailable)
}
