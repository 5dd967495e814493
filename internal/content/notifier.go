package content

import (
	"context"
	"errors"
	"log/slog"
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
	Notices repository.Announcer
	// Bundle reads a dequeued bundle as it was dequeued
	// (repository.Repository.DequeuedBundle).
	Bundle func(ctx context.Context, recipient, bundleID string) (*domain.Bundle, error)
	// Interval is how often the outbox is looked at (default 1 s); after a
	// failed delivery the next look waits longer, up to RetryMax (default 1 min).
	Interval, RetryMax time.Duration
	// CallTimeout bounds one BundleDequeued call (default 30 s).
	CallTimeout time.Duration
	// Batch is how many notices one look takes (default 100).
	Batch  int
	Logger *slog.Logger
}

// Notifier tells domains that their bundles were dequeued, at least once:
// each dequeue wrote a notice in its own atomic write, and a notice is only
// removed once its domain answered, so neither a crash nor a failing domain
// loses one. Domains must tolerate hearing of a dequeue twice.
type Notifier struct {
	opts     NotifierOptions
	stopping chan struct{} // closed by Close: no new notice is started
	done     chan struct{}
}

// stopGrace is how long Close lets a call in flight finish before it cuts
// it off (its notice then stays, to be delivered after a restart).
const stopGrace = 2 * time.Second

// StartNotifier starts delivering; Close stops it.
func StartNotifier(opts NotifierOptions) *Notifier {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
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
	n := &Notifier{opts: opts, stopping: make(chan struct{}), done: make(chan struct{})}
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

// Close stops delivering: the notice in flight is finished (within
// stopGrace) and the delivered ones are removed.
func (n *Notifier) Close() {
	close(n.stopping)
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
	wait := n.opts.Interval
	for {
		select {
		case <-n.stopping:
			return
		case <-time.After(wait):
		}
		more, failed := n.round(ctx)
		switch {
		case failed:
			wait = min(2*wait, n.opts.RetryMax)
		case more:
			wait = 0 // a full batch went out: take the next at once
		default:
			wait = n.opts.Interval
		}
	}
}

// round delivers one batch of notices and removes the delivered ones. It
// reports whether the batch was full and whether a delivery failed.
func (n *Notifier) round(ctx context.Context) (more, failed bool) {
	log := n.opts.Logger
	notices, err := n.opts.Notices.Notices(ctx, n.opts.Batch)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("reading the notices of dequeues failed", "error", err)
		}
		return false, true
	}
	var done []repository.Notice
	down := map[domain.Origin]bool{} // a domain that failed is not asked again this round
	for _, notice := range notices {
		if n.stopped() {
			break
		}
		b, err := n.opts.Bundle(ctx, notice.Recipient, notice.BundleID)
		if errors.Is(err, domain.ErrNotFound) {
			log.Warn("a dequeued bundle was removed by retention before its domain heard of it", "bundle", notice.BundleID)
			done = append(done, notice)
			continue
		}
		if err != nil {
			failed = true
			continue
		}
		if down[b.Origin] {
			continue
		}
		provider := n.opts.Providers[b.Origin]
		if provider == nil {
			log.Warn("the domain of a dequeued bundle has no provider any more; it is not told", "bundle", b.ID, "origin", b.Origin)
			done = append(done, notice)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, n.opts.CallTimeout)
		_, err = provider.BundleDequeued(cctx, &messagehubv1.BundleDequeuedRequest{Bundle: apiconv.Bundle(b)})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("telling a domain of a dequeue failed; it is tried again", "bundle", b.ID, "origin", b.Origin, "error", err)
			}
			down[b.Origin], failed = true, true
			continue
		}
		done = append(done, notice)
	}
	if len(done) > 0 {
		// Delivered is delivered: record it even when stopping, within bounds.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.opts.CallTimeout)
		defer cancel()
		if err := n.opts.Notices.RemoveNotices(rctx, done); err != nil {
			// They will be delivered again: at least once, never lost.
			log.Warn("removing delivered notices failed", "error", err)
			return false, true
		}
	}
	return len(notices) == n.opts.Batch, failed
}
