// Package figures keeps the backlog figures of a store (store.Figures): one
// instance of those sharing the store at a time, the holder of the store's
// figures lease, keeps a tally of every recipient's backlog in memory and
// stores the figures from it, which every instance's gauges and the admin
// calls then read in one read each. The holder counts every recipient when
// it takes the lease and once a day; in between it reads only the
// recipients that changed (store.Figures.ChangedBacklog), so that an idle
// recipient costs nothing. Both kinds of update are paced by what they
// cost, with a low-priority context.
package figures

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// Defaults of Options.
const (
	// DefaultEvery is the least time between two updates of the figures.
	DefaultEvery = time.Minute
	// DefaultFullEvery is the least time between two recounts of every
	// recipient, which correct what following the changes may have missed
	// (documents a store deletes without a trace in its change feed).
	DefaultFullEvery = 24 * time.Hour
	// DefaultBudget is what each kind of update (following the changes,
	// recounting everything) may cost per second on average, in the
	// store's unit of cost (request units on Cosmos DB): with the reads of
	// the totals (one point read per instance per gauge interval) the
	// figures of a whole cluster stay within 50 RU/s.
	DefaultBudget = 20.0
)

// Options shape a Keeper.
type Options struct {
	// Every is how often Run looks whether an update is due (default
	// DefaultEvery), and so the least time between two of its updates.
	Every time.Duration
	// FullEvery is the least time between two recounts of every recipient
	// (default DefaultFullEvery).
	FullEvery time.Duration
	// Budget is what each kind of update may cost per second on average
	// (default DefaultBudget): an update that cost c waits at least
	// c/Budget seconds for the next of its kind.
	Budget float64
	Now    func() time.Time
	Logger *slog.Logger
}

// Keeper keeps the figures of a store while it holds their lease.
type Keeper struct {
	store  store.Store
	opts   Options
	holder string

	// What the holder keeps between updates; cursor is empty when it
	// holds nothing (not the holder, or not yet counted). wrote is when
	// the figures it last wrote (or tried to) were computed.
	tally   store.Tally
	cursor  string
	wrote   time.Time
	history []store.BacklogSample
	written store.BacklogFigures // the lists and history last written
	fullAt  time.Time
	full    float64   // the last recount's cost
	heldAt  time.Time // when the lease was last taken or extended (from)

	// listed says that written holds the lists as stored: a keeper that
	// takes the figures over has written none yet, and the last holder's
	// are in the store, however empty its own are.
	listed bool
}

// New returns a Keeper of s's figures.
func New(s store.Store, opts Options) *Keeper {
	opts.Every = cmp.Or(opts.Every, DefaultEvery)
	opts.FullEvery = cmp.Or(opts.FullEvery, DefaultFullEvery)
	opts.Budget = cmp.Or(opts.Budget, DefaultBudget)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	return &Keeper{store: s, opts: opts, holder: uuid.NewString()}
}

// paced is when an update of its kind that cost cost at at may follow.
func (k *Keeper) paced(at time.Time, least time.Duration, cost float64) time.Time {
	return at.Add(max(least, time.Duration(cost/k.opts.Budget*float64(time.Second))))
}

// Turn updates the figures if they are due and this instance holds (or
// takes) the figures lease; it reports whether it updated them.
func (k *Keeper) Turn(ctx context.Context) (bool, error) {
	ctx = k.store.LowPriority(ctx)
	last, err := k.store.ReadFigures(ctx, store.FigureTotals)
	if err != nil {
		return false, err
	}
	if k.cursor != "" && last.ComputedAt.After(k.wrote) {
		// Another instance wrote the figures since this one did (it took
		// the lease over while this one stalled): they go on from its
		// history and lists, not from what this one kept.
		k.forget()
	}
	now := k.opts.Now()
	// The last update ended some time into its turn, and this turn came
	// Every after that turn began: half an Every of slack lets it update,
	// where pacing from the end by a whole Every skipped every other turn.
	if !last.ComputedAt.IsZero() && now.Before(k.paced(last.ComputedAt, k.opts.Every-k.opts.Every/2, last.Cost)) {
		// An update that cost more than the lease's worth of budget paces
		// the next past the lease: the holder keeps it meanwhile, or the
		// instance whose turn comes first when the update is due takes it
		// over and counts every recipient again.
		if k.cursor != "" && !now.Before(k.heldAt.Add(k.lease()/2)) {
			_, err := k.hold(ctx)
			return false, err
		}
		return false, nil
	}
	held, err := k.hold(ctx)
	if err != nil || !held {
		return false, err
	}
	if k.cursor == "" || !now.Before(k.paced(k.fullAt, k.opts.FullEvery, k.full)) {
		return k.updated(k.recount(ctx))
	}
	var changes store.BacklogChanges
	err = k.holding(ctx, func() (err error) {
		changes, err = k.store.ChangedBacklog(ctx, k.cursor)
		return err
	})
	if err != nil {
		if !errors.Is(err, domain.ErrUnavailable) && ctx.Err() == nil {
			// Not a passing refusal (a cursor the store no longer takes,
			// say): count again rather than fail on every turn.
			k.forget()
		}
		return false, err
	}
	if changes.All {
		k.tally.Reset()
	}
	for _, r := range changes.Recipients {
		k.tally.Set(r)
	}
	k.cursor = changes.Cursor
	return k.updated(k.write(ctx, changes.Cost))
}

// hold takes or extends the figures lease for this keeper. The lease
// outlasts a few turns: another instance takes over only from a holder
// that stopped, or stalled past it (its writes are then refused). A take
// that fails (a 503, a timeout) says nothing of who holds the lease: the
// tally and its place in the changes stay good, and a turn that finds the
// lease another's, or figures written after its own, drops them then;
// dropped now, the next turn would count every recipient again.
func (k *Keeper) hold(ctx context.Context) (bool, error) {
	at := k.opts.Now()
	held, err := k.store.HoldFiguresLease(ctx, k.holder, k.lease())
	if held {
		k.heldAt = at
	}
	if err == nil && !held {
		k.forget() // another holder's changes are not in this tally
	}
	return held, err
}

// holding runs read, an update's reading of the store, extending the
// figures lease every Every while it runs: a recount costs in proportion
// to every recipient's cabinets and, at low priority, can run longer than
// the lease, and another instance would take the lease over half-way, its
// own recount as long, each holder's figures refused after the next took
// over. A lease found lost is not extended again (the update's write is
// refused). The extensions end with read, before the write, which
// replaces the lease on the etag it reads and takes a change of that etag
// for another instance's: an extension under way is let finish rather
// than cancelled, which could leave its request to reach the store after
// the write read the lease.
func (k *Keeper) holding(ctx context.Context, read func() error) error {
	stop, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticking(stop, k.opts.Every, func() bool {
			held, err := k.store.HoldFiguresLease(ctx, k.holder, k.lease())
			return held || err != nil
		})
	}()
	defer func() { cancel(); <-done }()
	return read()
}

// lease is how long the figures lease is taken for: a few turns.
func (k *Keeper) lease() time.Duration { return 5 * k.opts.Every }

// updated is what Turn reports of an update that ended with err. One whose
// write was refused because another instance took the lease over (this
// one stalled past it) updated nothing and is no failure: the new holder
// keeps the figures, and this keeper holds nothing any more.
func (k *Keeper) updated(err error) (bool, error) {
	if errors.Is(err, store.ErrNotHolder) {
		k.opts.Logger.Info("the figures lease was taken over during an update; another instance keeps the figures", "err", err)
		return false, nil
	}
	return true, err
}

// forget drops what the keeper holds: the next update it makes recounts.
func (k *Keeper) forget() {
	k.tally.Reset()
	k.cursor, k.history, k.written, k.listed = "", nil, store.BacklogFigures{}, false
}

// Recount takes the figures lease (or extends it), counts every recipient
// now and stores the figures; store.ErrNotHolder while another instance
// holds the lease.
func (k *Keeper) Recount(ctx context.Context) error {
	held, err := k.hold(ctx)
	if err != nil {
		return err
	}
	if !held {
		return store.ErrNotHolder
	}
	return k.recount(ctx)
}

// recount counts every recipient now and stores the figures. The cursor of
// the changes is taken first, so that a change during the recount is read
// again after it rather than missed.
func (k *Keeper) recount(ctx context.Context) error {
	if k.cursor == "" { // taking over: the history goes on from the last holder's
		h, err := k.store.ReadFigures(ctx, store.FigureHistory)
		if err != nil {
			return err
		}
		k.history = h.History
	}
	start, err := k.store.ChangedBacklog(ctx, "")
	if err != nil {
		return err
	}
	k.tally.Reset()
	var cost float64
	err = k.holding(ctx, func() (err error) {
		cost, err = k.store.ScanBacklog(ctx, func(r store.RecipientRecords) error {
			k.tally.Set(r)
			return nil
		})
		return err
	})
	if err != nil {
		k.forget()
		return err
	}
	k.cursor, k.fullAt, k.full = start.Cursor, k.opts.Now(), start.Cost+cost
	return k.write(ctx, 0)
}

// write stores the figures of the tally; the lists and the history only
// when they changed. A write refused because the lease was taken over
// drops what the keeper holds: the new holder's changes are not in it.
func (k *Keeper) write(ctx context.Context, cost float64) error {
	var notices int
	var oldest time.Time
	if err := k.holding(ctx, func() (err error) {
		notices, oldest, err = k.store.NoticeBacklog(ctx)
		return err
	}); err != nil {
		return err
	}
	f := k.tally.Figures(k.opts.Now(), k.history)
	f.Cost, f.FullAt, f.FullCost = cost, k.fullAt, k.full
	f.Notices, f.OldestNotice = notices, oldest
	var parts store.FigureParts
	if !k.listed || !slices.Equal(f.Oldest, k.written.Oldest) || !slices.Equal(f.Largest, k.written.Largest) {
		parts |= store.FigureLists
	}
	if len(f.History) != len(k.history) || (len(f.History) > 0 && !f.History[len(f.History)-1].At.Equal(k.history[len(k.history)-1].At)) {
		parts |= store.FigureHistory
	}
	// Figures of this update found stored later are its own, whatever the
	// write answers: one whose answer was lost may have applied.
	k.wrote = f.ComputedAt
	if err := k.store.WriteFigures(ctx, k.holder, f, parts); err != nil {
		if errors.Is(err, store.ErrNotHolder) {
			k.forget()
		}
		return err
	}
	k.history, k.written.Oldest, k.written.Largest, k.listed = f.History, f.Oldest, f.Largest, true
	return nil
}

// Run takes a turn now and every Every until ctx ends, then gives the lease
// up.
func (k *Keeper) Run(ctx context.Context) {
	defer func() {
		release, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := k.store.ReleaseFiguresLease(release, k.holder); err != nil {
			k.opts.Logger.Warn("releasing the figures lease failed; it runs out by itself", "err", err)
		}
	}()
	turn := func() bool {
		if _, err := k.Turn(ctx); err != nil && ctx.Err() == nil {
			k.opts.Logger.Warn("updating the backlog figures failed", "err", err)
		}
		return true
	}
	turn()
	ticking(ctx, k.opts.Every, turn)
}

// ticking calls fn every d until ctx ends or fn returns false.
func ticking(ctx context.Context, d time.Duration, fn func() bool) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !fn() {
			return
		}
	}
}
