package content

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/apiconv"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// NotifierOptions configure a Notifier. Zero durations take defaults.
type NotifierOptions struct {
	// Providers are the domains told of their bundles' dequeues.
	Providers map[domain.Origin]messagehubv1.BundleContentProviderClient
	// Notices is the store's outbox: the notices of dequeues to tell.
	Notices store.Outbox
	// Bundle reads the dequeued bundle a notice tells of, as it was
	// dequeued; domain.ErrNotFound when there is none (hub.Hub.NoticedBundle).
	Bundle func(ctx context.Context, n store.Notice) (*domain.Bundle, error)
	// Interval is how soon a domain's notices are looked at again after a
	// look that found some (default 1 s). Looks that find none wait longer
	// and longer, doubling up to IdleMax (default 30 s): notices that other
	// instances wrote are found within IdleMax, those of this instance at
	// once through Signal (within Interval while the domain is busy). A domain
	// whose delivery failed is looked at again after a backoff of its own,
	// doubling from Interval up to RetryMax (default 1 min); so is a domain
	// whose look or removal failed in the store, and so is each notice held
	// back (its bundle cannot be read, or its domain refuses it while it
	// takes others).
	Interval, IdleMax, RetryMax time.Duration
	// Signal, sent when this instance's dequeue wrote a notice, starts a look
	// at once and tells the notifier which notices are its own; nil: none.
	Signal *NoticeSignal
	// Grace is how old a notice must be before this instance tells its
	// domain of it, unless its own dequeue wrote it (Signal). Instances that
	// share a store (Cosmos DB) each tell their own dequeues at once and
	// leave the others' to them: one call per dequeue instead of one per
	// instance, while a notice whose instance died or whose domain failed
	// there is told by any instance once overdue. 0 (one instance): every
	// notice is due at once.
	Grace time.Duration
	// CallTimeout bounds one BundleDequeued call (default 30 s).
	CallTimeout time.Duration
	// Batch is how many notices one look takes (default 100).
	Batch  int
	Logger *slog.Logger
	// Metrics, when set, counts the notices held back (telemetry.Metrics).
	Metrics NoticeMetrics
	// Clock is the time the notifier waits by; nil is the real one (tests
	// drive their own, so that they count looks instead of timing them).
	Clock Clock
}

// NoticeMetrics counts the notices a Notifier holds back, by domain and
// reason: "unreadable" (their bundle cannot be read) or "refused" (their
// domain refuses them while it takes its other notices).
type NoticeMetrics interface {
	RecordNoticesHeld(ctx context.Context, origin, reason string, delta int64)
}

// NoticeSignal wakes a Notifier's worker of a domain when this instance's dequeue
// wrote a notice of it, and remembers the notice as this instance's own
// (which the notifier tells at once, before its Grace). Sending never
// blocks; signals while the worker is busy make one look after it.
type NoticeSignal struct {
	mu   sync.Mutex
	subs map[chan struct{}]domain.Origin // each listening worker and its domain
	// own and older hold this instance's notices not yet told, sent since
	// since and in the Grace before: each is remembered for at least Grace
	// after its dequeue, when it is due anyway.
	own, older map[noticeID]bool
	since      time.Time
	grace      time.Duration // the notifier's; 0: nothing is remembered
}

// noticeID names a notice: its recipient's bundle id and its dequeue time
// (unix µs, as the stores keep it), as a bundle id is free again once its
// record is gone and the notice of its earlier dequeue may still wait.
type noticeID struct {
	recipient, bundleID string
	at                  int64
}

func idOf(n store.Notice) noticeID {
	return noticeID{n.Recipient, n.BundleID, n.DequeuedAt.UnixMicro()}
}

// maxOwn bounds the notices a NoticeSignal remembers (about 150 bytes each); those
// beyond it are told once overdue, as another instance's would be.
const maxOwn = 100_000

// NewNoticeSignal returns a signal to give a Notifier and send after dequeues that
// wrote a notice (hub.Options.OnNotice).
func NewNoticeSignal() *NoticeSignal {
	return &NoticeSignal{subs: map[chan struct{}]domain.Origin{}, own: map[noticeID]bool{}, older: map[noticeID]bool{}}
}

// Send tells the notifier of a notice this instance's dequeue wrote.
func (b *NoticeSignal) Send(n store.Notice) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.grace > 0 {
		if n.DequeuedAt.Sub(b.since) >= b.grace {
			b.older, b.own, b.since = b.own, map[noticeID]bool{}, n.DequeuedAt
		}
		if len(b.own)+len(b.older) < maxOwn {
			b.own[idOf(n)] = true
		}
	}
	for c, o := range b.subs {
		if o == n.Origin {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

// remember makes the signal remember sent notices for grace (0: none).
func (b *NoticeSignal) remember(grace time.Duration) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.grace = grace
}

// mine says whether this instance's dequeue wrote the notice.
func (b *NoticeSignal) mine(n store.Notice) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	id := idOf(n)
	return b.own[id] || b.older[id]
}

// forget drops told notices.
func (b *NoticeSignal) forget(notices []store.Notice) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range notices {
		id := idOf(n)
		delete(b.own, id)
		delete(b.older, id)
	}
}

// listen returns a channel that hears the signal's notices of the domain until
// stop is called; nil (which never hears anything) without a signal.
func (b *NoticeSignal) listen(o domain.Origin) (c <-chan struct{}, stop func()) {
	if b == nil {
		return nil, func() {}
	}
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs[ch] = o
	return ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.subs, ch)
	}
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
// Each domain has a worker of its own, which looks at that domain's notices
// only, tells it of them in order and backs off on its own when it fails:
// however long a domain's calls hang or however many notices it has, the
// other domains' workers never wait for it. A notice the domain refuses
// while it takes others (one it cannot receive or handle) is kept and held
// back on a backoff of its own, and does not hold up the domain's others.
type Notifier struct {
	opts      NotifierOptions
	stopping  chan struct{} // closed by Close: no new notice is started
	closeOnce sync.Once
	done      chan struct{} // closed when every worker has returned
}

// stopGrace is how long Close lets a call in flight finish before it cuts
// it off (its notice then stays, to be delivered after a restart).
const stopGrace = 2 * time.Second

// StartNotifier starts delivering; Close stops it.
func StartNotifier(opts NotifierOptions) *Notifier {
	opts.Interval = cmp.Or(opts.Interval, time.Second)
	if opts.IdleMax < opts.Interval {
		opts.IdleMax = max(30*time.Second, opts.Interval)
	}
	if opts.RetryMax < opts.Interval {
		opts.RetryMax = max(time.Minute, opts.Interval)
	}
	opts.CallTimeout = cmp.Or(opts.CallTimeout, 30*time.Second)
	opts.Batch = cmp.Or(opts.Batch, 100)
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	opts.Signal.remember(opts.Grace)
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
	var wg sync.WaitGroup
	for _, o := range slices.Sorted(maps.Keys(opts.Providers)) {
		wake, stop := opts.Signal.listen(o)
		w := &worker{n: n, origin: o, wake: wake}
		wg.Go(func() {
			defer stop()
			w.loop(ctx)
		})
	}
	go func() {
		wg.Wait()
		close(n.done)
	}()
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

// worker tells one domain of its notices.
type worker struct {
	n      *Notifier
	origin domain.Origin
	wake   <-chan struct{} // the signal; nil: none
	// held are the notices whose bundle could not be read, or which the
	// domain refused while it took others, each left out until its own
	// backoff ends: a look skips them without a read, and tries the
	// notices not held before the held ones whose backoff ended. The
	// outbox lists a batch after the last one it listed (store.Outbox), so
	// the notices behind held ones, however many, come up in turn.
	held map[noticeID]heldNotice
	// holdsFull says the last hold found the holds full (and said so in
	// the log once).
	holdsFull bool
	// failed holds the look (numbered by looks) in which each notice's
	// call last failed, until it is told: when a call fails, the notice
	// tried next, to learn whether the domain takes any, is the one that
	// failed longest ago (first those that never did), so that a run of
	// notices the domain refuses does not look like a domain that is down.
	failed map[noticeID]int
	looks  int
}

// maxHeldBatches bounds the notices a worker holds, in batches. A notice
// whose read fails beyond it, or that its domain refuses, is not held: it
// is tried again each time the looks come round to it, a batch at most per
// look like any other.
const maxHeldBatches = 10

// heldNotice is a notice left out until the time set, after a failed read
// of its bundle or a call its domain refused; wait is its backoff,
// doubling from Interval up to RetryMax.
type heldNotice struct {
	until   time.Time
	wait    time.Duration
	refused bool // by the domain; false: its bundle could not be read
}

func (h heldNotice) reason() string {
	if h.refused {
		return "refused"
	}
	return "unreadable"
}

// setHold holds a notice, and counts it.
func (w *worker) setHold(id noticeID, h heldNotice) {
	if w.held == nil {
		w.held = map[noticeID]heldNotice{}
	}
	prev, had := w.held[id]
	w.held[id] = h
	if had && prev.refused == h.refused {
		return
	}
	if had {
		w.countHeld(prev, -1)
	}
	w.countHeld(h, 1)
}

// release forgets a notice's hold, if any.
func (w *worker) release(id noticeID) {
	if h, ok := w.held[id]; ok {
		delete(w.held, id)
		w.countHeld(h, -1)
	}
}

func (w *worker) countHeld(h heldNotice, delta int64) {
	if m := w.n.opts.Metrics; m != nil {
		m.RecordNoticesHeld(context.Background(), w.origin.Name(), h.reason(), delta)
	}
}

// hold leaves a notice out for a while, after its bundle could not be read
// or its domain refused it (refused) while it took others, unless the
// worker holds as many as it may, and logs why: at warn when the notice is
// held for the first time (or for another reason), at debug when it fails
// again, so that a notice that never goes through is one warning, not one
// a look. That the holds are full is one warning too, until they are not.
func (w *worker) hold(notice store.Notice, refused bool, err error) {
	log := w.n.opts.Logger
	id := idOf(notice)
	prev, again := w.held[id]
	msg := "reading a dequeued bundle failed; it is held back and tried again later"
	if refused {
		msg = "the domain refused the notice of one dequeue while it took others; it is held back and tried again later"
	}
	if !again && len(w.held) >= maxHeldBatches*w.n.opts.Batch {
		if !w.holdsFull {
			log.Warn("more notices fail than the notifier holds back; the others are tried again whenever a look lists them",
				"origin", w.origin, "held", len(w.held))
			w.holdsFull = true
		}
		log.Debug(msg, "bundle", notice.BundleID, "origin", w.origin, "error", err)
		return
	}
	if again && prev.refused != refused {
		prev, again = heldNotice{}, false
	}
	wait := min(max(2*prev.wait, w.n.opts.Interval), w.n.opts.RetryMax)
	w.setHold(id, heldNotice{until: w.n.opts.Clock.Now().Add(wait), wait: wait, refused: refused})
	level := slog.LevelWarn
	if again {
		level = slog.LevelDebug
	}
	log.Log(context.Background(), level, msg, "bundle", notice.BundleID, "origin", w.origin, "error", err, "retry_in", wait)
}

// keepHeld forgets the holds and failures of notices a look that listed
// every notice of the domain (a short batch) no longer lists: told, here or
// by another instance. A full batch is only part of the outbox, so it
// forgets none; the failures are only a preference, so they are forgotten
// once they are as many as the holds may be.
func (w *worker) keepHeld(listed []store.Notice, every bool) {
	if (len(w.held) > 0 || len(w.failed) > 0) && every {
		ids := make(map[noticeID]bool, len(listed))
		for _, notice := range listed {
			ids[idOf(notice)] = true
		}
		for id := range w.held {
			if !ids[id] {
				w.release(id)
			}
		}
		maps.DeleteFunc(w.failed, func(id noticeID, _ int) bool { return !ids[id] })
	}
	if len(w.failed) > maxHeldBatches*w.n.opts.Batch {
		clear(w.failed)
	}
	if len(w.held) < maxHeldBatches*w.n.opts.Batch {
		w.holdsFull = false
	}
}

func (w *worker) loop(ctx context.Context) {
	n := w.n
	defer func() { // a notifier that stopped holds nothing back
		for id := range w.held {
			w.release(id)
		}
	}()
	wait := time.Duration(0) // notices left by the last run go out at once
	idle := n.opts.Interval
	var retry, storeWait time.Duration // backoffs after the domain or the store failed
	var listen bool                    // whether the signal cuts the wait short
	for {
		if wait > 0 {
			var signal <-chan struct{}
			if listen {
				signal = w.wake
			}
			select {
			case <-n.stopping:
				return
			case <-signal:
			case <-n.opts.Clock.After(wait):
			}
		} else if n.stopped() {
			return
		}
		r := w.round(ctx)
		// Only an idle wait listens: a busy domain is looked at again within
		// Interval anyway, and a failing domain or store is not asked
		// sooner, so steady dequeues never make more than a look per
		// Interval and domain.
		listen = !r.storeFailed && !r.failed && r.found == 0
		if r.storeFailed {
			storeWait = min(max(2*storeWait, n.opts.Interval), n.opts.RetryMax)
			wait = storeWait
			continue
		}
		storeWait = 0
		switch {
		case r.failed:
			retry = min(max(2*retry, n.opts.Interval), n.opts.RetryMax)
			wait = retry
			continue
		case r.full && r.moved:
			// A full batch that moved: take the next at once.
			wait, idle = 0, n.opts.Interval
		case r.full:
			// A full batch of notices held back or not due yet: the next
			// look lists the batch after it, within Interval, so that
			// notices behind any number of those are reached, a batch a
			// look.
			wait, idle = n.opts.Interval, n.opts.Interval
		case r.found == 0:
			// Idle: each empty look costs a query (across partitions on
			// Cosmos DB), so they thin out; this instance's own notices
			// send the signal. Another instance's notice that was left
			// for it is looked at again once it is due.
			wait, idle = idle, min(2*idle, n.opts.IdleMax)
			if r.dueIn > 0 {
				wait = min(wait, r.dueIn)
			}
		default:
			wait, idle = n.opts.Interval, n.opts.Interval
		}
		// Told, or nothing left to tell (another instance told it): the
		// domain is back.
		retry = 0
	}
}

type roundResult struct {
	found       int           // notices due
	dueIn       time.Duration // until the first notice left for its instance is due; 0: none
	full        bool          // the batch was full: more may wait after it
	moved       bool          // some notices were told (or found gone)
	failed      bool          // a domain failed to answer
	storeFailed bool
}

// round tells the domain of one batch of its notices, in order, and removes
// the delivered ones. A failed call is the domain's failure, which ends the
// look (the domain backs off as a whole and its notices keep their order),
// unless the domain takes another notice in the same look: then the notice
// was refused on its own, and is held back on a backoff of its own while
// the domain hears of the rest (a notice held so fails again without
// ending the look). After a failure, the notice tried next is the one whose
// call failed longest ago (next), so a run of refused notices at the head
// of the outbox is got past, a notice a look; a notice that never failed
// is not tried further in a look where the domain took none, so a domain
// that is down is asked once a backoff, twice once its first notice has
// failed before.
func (w *worker) round(ctx context.Context) roundResult {
	n, log := w.n, w.n.opts.Logger
	notices, err := n.opts.Notices.Notices(ctx, []domain.Origin{w.origin}, n.opts.Batch)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("reading the notices of dequeues failed", "origin", w.origin, "error", err)
		}
		return roundResult{storeFailed: true}
	}
	w.keepHeld(notices, len(notices) < n.opts.Batch)
	due, dueIn := w.due(notices)
	res := roundResult{found: len(due), dueIn: dueIn, full: len(notices) >= n.opts.Batch}
	w.looks++
	var done []store.Notice
	var failing []failedCall   // failed calls since the domain last took one, none of them held
	took, left := false, false // the domain took a notice in this look; every notice was tried
	tried := make([]bool, len(due))
	unread, answered := 0, 0 // bundle reads that failed, and that the store answered
	for !n.stopped() {
		i := w.next(due, tried, len(failing) > 0)
		if i < 0 {
			left = true
			break
		}
		tried[i] = true
		notice := due[i]
		id := idOf(notice)
		b, err := n.opts.Bundle(ctx, notice)
		if errors.Is(err, domain.ErrNotFound) {
			log.Warn("a dequeued bundle was removed by retention before its domain heard of it", "bundle", notice.BundleID)
			answered++
			w.told(id)
			done = append(done, notice)
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				res.storeFailed = true
				break
			}
			// This bundle may be the only one that cannot be read, or one
			// of a run of them: it is backed off on its own and the domain
			// hears of the rest, each read once in this look.
			w.hold(notice, false, err)
			unread++
			continue
		}
		if h, ok := w.held[id]; ok && !h.refused {
			w.release(id)
		}
		answered++
		provider := n.opts.Providers[b.Origin]
		if provider == nil {
			log.Warn("the domain of a dequeued bundle has no provider any more; it is not told", "bundle", b.ID, "origin", b.Origin)
			w.told(id)
			done = append(done, notice)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, n.opts.CallTimeout)
		_, err = provider.BundleDequeued(cctx, &messagehubv1.BundleDequeuedRequest{Bundle: apiconv.Bundle(b)})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				res.failed = true
				break
			}
			if w.held[id].refused { // refused before, while the domain took others
				w.hold(notice, true, err)
				continue
			}
			_, before := w.failed[id]
			if w.failed == nil {
				w.failed = map[noticeID]int{}
			}
			w.failed[id] = w.looks
			failing = append(failing, failedCall{notice, err, before})
			if len(failing) > 1 || !took && !before {
				break // the domain is failing: it is not asked more now
			}
			continue
		}
		// The domain answered: the calls that failed before were refused.
		for _, f := range failing {
			w.hold(f.notice, true, f.err)
		}
		failing, took = nil, true
		w.told(id)
		done = append(done, notice)
	}
	switch {
	case len(failing) == 0:
	case left && took:
		// Nothing was left to try after it, and the domain took others.
		w.hold(failing[0].notice, true, failing[0].err)
	default:
		res.failed = true
		for _, f := range failing {
			level := slog.LevelWarn
			if f.before {
				level = slog.LevelDebug
			}
			log.Log(ctx, level, "telling a domain of a dequeue failed; it is tried again", "bundle", f.notice.BundleID, "origin", w.origin, "error", f.err)
		}
	}
	// Reads that all failed, more than one, say the store is failing: the
	// domain waits for the store's backoff, so a store that fails every
	// read costs a batch of reads per backoff.
	if unread > 1 && answered == 0 {
		res.storeFailed = true
	}
	res.moved = len(done) > 0
	if len(done) > 0 {
		// Delivered is delivered: record it even when stopping, within bounds.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.opts.CallTimeout)
		defer cancel()
		if err := n.opts.Notices.RemoveNotices(rctx, done); err != nil {
			// They will be delivered again: at least once, never lost.
			log.Warn("removing delivered notices failed", "error", err)
			res.storeFailed = true
		}
		n.opts.Signal.forget(done)
	}
	return res
}

// failedCall is a notice whose call failed in a look, with its error, and
// whether its call had failed before.
type failedCall struct {
	notice store.Notice
	err    error
	before bool
}

// next returns the index of the notice to try next among those not tried
// in this look, -1 when none is left: the first in order, or after a
// failed call (afterFailure) the one whose call failed longest ago, first
// those that never failed, to learn whether the domain takes any.
func (w *worker) next(due []store.Notice, tried []bool, afterFailure bool) int {
	best, bestLook := -1, 0
	for i, notice := range due {
		if tried[i] {
			continue
		}
		if !afterFailure {
			return i
		}
		look := w.failed[idOf(notice)]
		if best < 0 || look < bestLook {
			best, bestLook = i, look
		}
		if look == 0 {
			break
		}
	}
	return best
}

// told forgets a notice's hold and failures once it is told (or need not be).
func (w *worker) told(id noticeID) {
	w.release(id)
	delete(w.failed, id)
}

// due returns the notices to tell now: this instance's own, and those of
// other instances once they are Grace old (their instance tells them before
// that), in order, less those held back (an unreadable bundle, a refused
// call) until their backoff ends, which follow the others once it has; and
// how long until the first one left out is due. The held ones go last
// because their backoffs end together with the store's or the domain's:
// first, they would fill every batch again, or end every look.
func (w *worker) due(notices []store.Notice) ([]store.Notice, time.Duration) {
	grace := w.n.opts.Grace
	if grace <= 0 && len(w.held) == 0 {
		return notices, 0
	}
	now := w.n.opts.Clock.Now()
	out := notices[:0:0]
	var retried []store.Notice
	var dueIn time.Duration
	for _, notice := range notices {
		left := time.Duration(0)
		if grace > 0 && !w.n.opts.Signal.mine(notice) {
			left = notice.DequeuedAt.Add(grace).Sub(now)
		}
		h, held := w.held[idOf(notice)]
		if held {
			left = max(left, h.until.Sub(now))
		}
		if left <= 0 {
			if held {
				retried = append(retried, notice)
			} else {
				out = append(out, notice)
			}
			continue
		}
		if dueIn == 0 || left < dueIn {
			dueIn = left
		}
	}
	return append(out, retried...), dueIn
}
