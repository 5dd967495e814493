package content

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/apiconv"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/repository"
)

// NotifierOptions configure a Notifier. Zero durations take defaults.
type NotifierOptions struct {
	// Providers are the domains told of their bundles' dequeues.
	Providers map[domain.Origin]messagehubv1.BundleContentProviderClient
	// Notices is the store's outbox of dequeues to announce.
	Notices repository.Outbox
	// Bundle reads a dequeued bundle as it was dequeued
	// (repository.Repository.DequeuedBundle).
	Bundle func(ctx context.Context, recipient, bundleID string) (*domain.Bundle, error)
	// Interval is how soon the outbox is looked at again after a look that
	// found notices (default 1 s). Looks that find none wait longer and
	// longer, doubling up to IdleMax (default 30 s): notices that other
	// instances wrote are found within IdleMax, those of this instance at
	// once through Bell (within Interval while the outbox is busy). A
	// domain whose delivery failed is left out of the looks for a while,
	// doubling from Interval up to RetryMax (default 1 min); so is the
	// whole outbox after the store failed.
	Interval, IdleMax, RetryMax time.Duration
	// Bell, rung when this instance's dequeue wrote a notice, starts a look
	// at once; nil: none.
	Bell *Bell
	// CallTimeout bounds one BundleDequeued call (default 30 s).
	CallTimeout time.Duration
	// Batch is how many notices one look takes (default 100).
	Batch  int
	Logger *slog.Logger
	// Clock is the time the notifier waits by; nil is the real one (tests
	// drive their own, so that they count looks instead of timing them).
	Clock Clock
}

// Bell wakes a Notifier. Ringing never blocks; rings while the notifier
// is busy make one look after it.
type Bell struct{ c chan struct{} }

// NewBell returns a bell to give a Notifier and ring after dequeues that
// wrote a notice (repository.Options.Announced).
func NewBell() *Bell { return &Bell{c: make(chan struct{}, 1)} }

// Ring wakes the notifier.
func (b *Bell) Ring() {
	select {
	case b.c <- struct{}{}:
	default:
	}
}

func (b *Bell) rung() <-chan struct{} {
	if b == nil {
		return nil
	}
	return b.c
}

// Clock tells the time and waits.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Notifier tells domains that their bundles were dequeued, at least once:
// each dequeue wrote a notice in its own atomic write, and a notice is only
// removed once its domain answered, so neither a crash nor a failing domain
// loses one. Domains must tolerate hearing of a dequeue twice.
//
// Domains are told in parallel and a failing one is backed off on its own:
// its notices are left out of the next looks, so however many it has, they
// never fill the batches the other domains' notices need.
type Notifier struct {
	opts      NotifierOptions
	stopping  chan struct{} // closed by Close: no new notice is started
	closeOnce sync.Once
	done      chan struct{}

	// Owned by the loop.
	down      map[domain.Origin]backoff // domains that failed, until they are tried again
	storeWait time.Duration             // backoff after the store failed
}

type backoff struct {
	wait  time.Duration
	until time.Time
}

// stopGrace is how long Close lets a call in flight finish before it cuts
// it off (its notice then stays, to be delivered after a restart).
const stopGrace = 2 * time.Second

// StartNotifier starts delivering; Close stops it.
func StartNotifier(opts NotifierOptions) *Notifier {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.IdleMax < opts.Interval {
		opts.IdleMax = max(30*time.Second, opts.Interval)
	}
	if opts.RetryMax < opts.Interval {
		opts.RetryMax = max(time.Minute, opts.Interval)
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 30 * time.Second
	}
	if opts.Batch <= 0 {
		opts.Batch = 100
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	n := &Notifier{opts: opts, stopping: make(chan struct{}), done: make(chan struct{}), down: map[domain.Origin]backoff{}}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-n.stopping
		select {
		case <-n.done:
		case <-time.After(stopGrace):
		}
		cancel()
	}()
	go n.loop(ctx)
	return n
}

// Close stops delivering: the notices in flight are finished (within
// stopGrace) and the delivered ones are removed. It may be called again.
func (n *Notifier) Close() {
	n.closeOnce.Do(func() { close(n.stopping) })
	<-n.done
}

func (n *Notifier) stopped() bool {
	select {
	case <-n.stopping:
		return true
	default:
		return false
	}
}

func (n *Notifier) loop(ctx context.Context) {
	defer close(n.done)
	wait := time.Duration(0) // notices left by the last run go out at once
	idle := n.opts.Interval
	var listen bool // whether the bell cuts the wait short
	for {
		if wait > 0 {
			var bell <-chan struct{}
			if listen {
				bell = n.opts.Bell.rung()
			}
			select {
			case <-n.stopping:
				return
			case <-bell:
			case <-n.opts.Clock.After(wait):
			}
		} else if n.stopped() {
			return
		}
		r := n.round(ctx)
		// Only an idle wait listens: a busy outbox is looked at again within
		// Interval anyway, and a failing store is not asked sooner, so
		// steady dequeues never make more than a look per Interval.
		listen = !r.storeFailed && r.found == 0
		switch {
		case r.storeFailed:
			n.storeWait = min(max(2*n.storeWait, n.opts.Interval), n.opts.RetryMax)
			wait = n.storeWait
			continue
		case r.full:
			// A full batch: take the next at once (the domains that failed
			// in it are left out of it).
			wait, idle = 0, n.opts.Interval
		case r.found == 0:
			// Idle: each empty look costs a query (across partitions on
			// Cosmos DB), so they thin out; this instance's own notices
			// ring the bell.
			wait, idle = idle, min(2*idle, n.opts.IdleMax)
		default:
			wait, idle = n.opts.Interval, n.opts.Interval
		}
		n.storeWait = 0
		if wait > 0 {
			wait = n.untilRetry(wait)
		}
	}
}

// untilRetry shortens wait to when the first domain that failed is tried
// again.
func (n *Notifier) untilRetry(wait time.Duration) time.Duration {
	now := n.opts.Clock.Now()
	for _, b := range n.down {
		if b.until.After(now) {
			wait = min(wait, b.until.Sub(now))
		}
	}
	return wait
}

// asked lists the domains whose notices the next look reads: every domain
// not backed off, and OriginUnspecified for notices older than origins.
func (n *Notifier) asked(now time.Time) []domain.Origin {
	out := []domain.Origin{domain.OriginUnspecified}
	for _, o := range domain.Origins {
		if b, ok := n.down[o]; !ok || !now.Before(b.until) {
			out = append(out, o)
		}
	}
	return out
}

type roundResult struct {
	found       int
	full        bool // the batch was full and moved: more may wait
	storeFailed bool
}

// round delivers one batch of notices, each domain's in parallel with the
// others', and removes the delivered ones.
func (n *Notifier) round(ctx context.Context) roundResult {
	log := n.opts.Logger
	now := n.opts.Clock.Now()
	notices, err := n.opts.Notices.Notices(ctx, n.asked(now), n.opts.Batch)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("reading the notices of dequeues failed", "error", err)
		}
		return roundResult{storeFailed: true}
	}
	byOrigin := map[domain.Origin][]repository.Notice{}
	for _, notice := range notices {
		byOrigin[notice.Origin] = append(byOrigin[notice.Origin], notice)
	}
	d := delivery{n: n, now: now, failed: map[domain.Origin]bool{}}
	var wg sync.WaitGroup
	for _, group := range byOrigin {
		wg.Go(func() { d.deliver(ctx, group) })
	}
	wg.Wait()
	for o := range d.failed {
		b := n.down[o]
		b.wait = min(max(2*b.wait, n.opts.Interval), n.opts.RetryMax)
		b.until = now.Add(b.wait)
		n.down[o] = b
	}
	for o, b := range n.down {
		// Asked again and not failing (told, or nothing left to tell): the
		// domain is back.
		if !d.failed[o] && !now.Before(b.until) {
			delete(n.down, o)
		}
	}
	// A full batch that changed nothing (notices without an origin, all of
	// domains backed off) must not be read again at once.
	progress := len(d.done) > 0 || len(d.failed) > 0
	res := roundResult{found: len(notices), full: progress && len(notices) == n.opts.Batch, storeFailed: d.storeFailed}
	if len(d.done) > 0 {
		// Delivered is delivered: record it even when stopping, within bounds.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.opts.CallTimeout)
		defer cancel()
		if err := n.opts.Notices.RemoveNotices(rctx, d.done); err != nil {
			// They will be delivered again: at least once, never lost.
			log.Warn("removing delivered notices failed", "error", err)
			res.storeFailed = true
		}
	}
	return res
}

// delivery is one round's outcome, shared by its domains' deliveries.
type delivery struct {
	n   *Notifier
	now time.Time

	mu          sync.Mutex
	done        []repository.Notice
	failed      map[domain.Origin]bool // not asked again this round
	storeFailed bool
}

// deliver tells the notices' domains of them in order; a domain that fails
// is not asked again this round. The notices are of one origin, except
// those written before notices had one, whose origin their bundle tells.
func (d *delivery) deliver(ctx context.Context, notices []repository.Notice) {
	n, log := d.n, d.n.opts.Logger
	for _, notice := range notices {
		if n.stopped() {
			return
		}
		b, err := n.opts.Bundle(ctx, notice.Recipient, notice.BundleID)
		if errors.Is(err, domain.ErrNotFound) {
			log.Warn("a dequeued bundle was removed by retention before its domain heard of it", "bundle", notice.BundleID)
			d.record(notice, domain.OriginUnspecified, nil)
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("reading a dequeued bundle failed", "bundle", notice.BundleID, "error", err)
			}
			d.mu.Lock()
			d.storeFailed = true
			d.mu.Unlock()
			return
		}
		if d.skip(b.Origin) {
			continue
		}
		provider := n.opts.Providers[b.Origin]
		if provider == nil {
			log.Warn("the domain of a dequeued bundle has no provider any more; it is not told", "bundle", b.ID, "origin", b.Origin)
			d.record(notice, domain.OriginUnspecified, nil)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, n.opts.CallTimeout)
		_, err = provider.BundleDequeued(cctx, &messagehubv1.BundleDequeuedRequest{Bundle: apiconv.Bundle(b)})
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Warn("telling a domain of a dequeue failed; it is tried again", "bundle", b.ID, "origin", b.Origin, "error", err)
		}
		d.record(notice, b.Origin, err)
	}
}

// skip says whether a domain failed this round or is backed off (only
// notices without an origin reach a domain backed off).
func (d *delivery) skip(o domain.Origin) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, down := d.n.down[o]
	return d.failed[o] || down && d.now.Before(b.until)
}

// record notes a notice delivered (err nil), or its domain failed.
func (d *delivery) record(notice repository.Notice, o domain.Origin, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.failed[o] = true
		return
	}
	d.done = append(d.done, notice)
}
