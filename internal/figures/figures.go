// Package figures keeps the backlog figures of a store (store.Figures): one
// instance of those sharing the store at a time, the holder of the store's
// figures lease, recounts every recipient's backlog with a low-priority
// context and stores the result, which every instance's gauges and the
// admin calls then read in one read each. Recounts are paced by what they
// cost, so that however many recipients the store holds and however many
// instances share it, they spend at most a budget of the store's capacity
// on average.
package figures

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/store"
)

// Defaults of Options.
const (
	// DefaultEvery is the least time between two recounts.
	DefaultEvery = 5 * time.Minute
	// DefaultBudget is what recounts may cost per second on average, in
	// the store's unit of cost (request units on Cosmos DB): the backlog
	// gauges of a whole cluster stay within 50 RU/s with the reads of the
	// totals (one point read per instance per gauge interval) beside it.
	DefaultBudget = 40.0
	// DefaultCheck is how often an instance looks whether a recount is due.
	DefaultCheck = time.Minute
)

// Options shape a Keeper.
type Options struct {
	// Every is the least time between two recounts (default DefaultEvery).
	Every time.Duration
	// Budget is what recounts may cost per second on average (default
	// DefaultBudget): a recount that cost c waits at least c/Budget
	// seconds for the next.
	Budget float64
	// Check is how often Run looks whether a recount is due (default
	// DefaultCheck).
	Check  time.Duration
	Now    func() time.Time
	Logger *slog.Logger
}

// Keeper recounts the figures of a store when they are due.
type Keeper struct {
	store  store.Store
	opts   Options
	holder string
}

// New returns a Keeper of s's figures.
func New(s store.Store, opts Options) *Keeper {
	if opts.Every <= 0 {
		opts.Every = DefaultEvery
	}
	if opts.Budget <= 0 {
		opts.Budget = DefaultBudget
	}
	if opts.Check <= 0 {
		opts.Check = DefaultCheck
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Keeper{store: s, opts: opts, holder: uuid.NewString()}
}

// NextAfter is when figures that cost cost are due again.
func (k *Keeper) NextAfter(f store.BacklogFigures) time.Time {
	paced := time.Duration(f.Cost / k.opts.Budget * float64(time.Second))
	return f.ComputedAt.Add(max(k.opts.Every, paced))
}

// Turn recounts the figures if they are due and this instance holds (or
// takes) the figures lease; it reports whether it recounted.
func (k *Keeper) Turn(ctx context.Context) (bool, error) {
	ctx = k.store.LowPriority(ctx)
	last, err := k.store.ReadFigures(ctx, store.FigureTotals)
	if err != nil {
		return false, err
	}
	if !last.ComputedAt.IsZero() && k.opts.Now().Before(k.NextAfter(last)) {
		return false, nil
	}
	// The lease outlasts a recount that takes as long as the pause between
	// two: another instance takes over only from a holder that stopped.
	held, err := k.store.HoldFiguresLease(ctx, k.holder, 2*max(k.opts.Every, k.opts.Check))
	if err != nil || !held {
		return false, err
	}
	return true, k.Recount(ctx)
}

// Recount recounts the figures now and stores them, with the history of
// the last ones carried on.
func (k *Keeper) Recount(ctx context.Context) error {
	var b store.FiguresBuilder
	cost, err := k.store.ScanBacklog(ctx, func(r store.RecipientRecords) error {
		b.Add(r)
		return nil
	})
	if err != nil {
		return err
	}
	notices, oldest, err := k.store.NoticeBacklog(ctx)
	if err != nil {
		return err
	}
	prev, err := k.store.ReadFigures(ctx, store.FigureHistory)
	if err != nil {
		return err
	}
	f := b.Figures(k.opts.Now(), prev.History)
	f.Cost, f.Notices, f.OldestNotice = cost, notices, oldest
	return k.store.WriteFigures(ctx, f)
}

// Run takes a turn now and every Check until ctx ends, then gives the lease
// up.
func (k *Keeper) Run(ctx context.Context) {
	defer func() {
		release, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := k.store.ReleaseFiguresLease(release, k.holder); err != nil {
			k.opts.Logger.Warn("releasing the figures lease failed; it runs out by itself", "err", err)
		}
	}()
	tick := time.NewTicker(k.opts.Check)
	defer tick.Stop()
	for {
		if _, err := k.Turn(ctx); err != nil && ctx.Err() == nil {
			k.opts.Logger.Warn("recounting the backlog figures failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
