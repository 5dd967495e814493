package audit

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Writer stores events durably (store.Store's AppendAudit): all of them or,
// on error, possibly some. Writing the same events again (a write that
// failed, repeated) stores each once.
type Writer interface {
	AppendAudit(ctx context.Context, events []Event) error
	// Hold keeps the writer open for the events written with the context
	// returned until release is called (hub.Hub.Hold): a remedy holds it
	// from before it starts until its record is written.
	Hold(ctx context.Context) (held context.Context, release func(), err error)
}

// Defaults of Options.
const (
	DefaultFlushInterval = time.Second
	DefaultFlushEvents   = 1000
	DefaultMaxBuffered   = 20000
	// flushTimeout bounds one flush's write.
	flushTimeout = 30 * time.Second
)

// Options configure a Log; zero fields take the defaults.
type Options struct {
	// FlushInterval is how often buffered events are written.
	FlushInterval time.Duration
	// FlushEvents starts a flush before the interval is up once this many
	// events are buffered.
	FlushEvents int
	// MaxBuffered is the most events held for writing; more are dropped
	// (and counted) rather than hold up the calls that make them.
	MaxBuffered int
	Logger      *slog.Logger
}

// Log writes audit events: Write at once (remedies, whose answer waits for
// it), Record in batches, so that an actor's call never waits for the audit
// log nor fails because of it. A flush hands every buffered event to the
// Writer in one call, ordered by recipient, which a store writes as one
// write per recipient; a flush that failed is written again as it was, on
// its own, before the events recorded since. Close flushes what is left.
type Log struct {
	w    Writer
	opts Options

	mu  sync.Mutex
	buf []Event
	// failed is the batch of a flush that failed, as it was written: the
	// next flush writes it again on its own, so that a store writes it as
	// the same writes (on Cosmos DB the same documents, each named by its
	// first event's key, which a repeat finds when a lost answer hid that
	// it was created). With the events recorded since, an earlier key
	// among them would name another document, and its events would be
	// stored twice.
	failed    []Event
	closed    bool
	kick      chan struct{} // a flush is due before the interval
	stop      chan struct{}
	stopped   chan struct{}
	flushMu   sync.Mutex // one flush at a time
	closeOnce sync.Once
	// runCtx is the periodic flushes'; Close cancels it when its own
	// context ends, so that a flush the store holds up does not hold Close.
	runCtx    context.Context
	cancelRun context.CancelFunc

	dropped   atomic.Int64
	buffered  atomic.Int64
	warnedAt  atomic.Int64 // unix ns of the last warning about drops
	droppedAt atomic.Int64 // drops counted when it was logged
}

// NewLog starts a Log over w; Close stops it.
func NewLog(w Writer, opts Options) *Log {
	opts.FlushInterval = cmp.Or(opts.FlushInterval, DefaultFlushInterval)
	opts.FlushEvents = cmp.Or(opts.FlushEvents, DefaultFlushEvents)
	opts.MaxBuffered = cmp.Or(opts.MaxBuffered, DefaultMaxBuffered)
	opts.FlushEvents = min(opts.FlushEvents, opts.MaxBuffered)
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	l := &Log{w: w, opts: opts, kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	l.runCtx, l.cancelRun = context.WithCancel(context.Background())
	go l.run()
	return l
}

// Write stores events before it returns: for a remedy, whose answer says
// it is recorded. Their keys are made here where they have none.
func (l *Log) Write(ctx context.Context, events ...Event) error {
	keyed := make([]Event, len(events))
	for i, e := range events {
		keyed[i] = withKey(e)
	}
	return l.w.AppendAudit(ctx, keyed)
}

// Hold keeps the writer open for the events written with the context
// returned until release is called (Writer.Hold).
func (l *Log) Hold(ctx context.Context) (held context.Context, release func(), err error) {
	return l.w.Hold(ctx)
}

// Record buffers e for the next flush and returns at once. A full buffer
// (MaxBuffered) or a closed log drops it: it is counted (Dropped) and a
// warning is logged at most once per flush interval.
func (l *Log) Record(e Event) {
	e = withKey(e)
	l.mu.Lock()
	if l.closed || len(l.failed)+len(l.buf) >= l.opts.MaxBuffered {
		l.mu.Unlock()
		l.drop(1)
		return
	}
	l.buf = append(l.buf, e)
	n := len(l.buf)
	l.buffered.Store(int64(len(l.failed) + n))
	l.mu.Unlock()
	if n >= l.opts.FlushEvents {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// Dropped is how many events were dropped since the log started.
func (l *Log) Dropped() int64 { return l.dropped.Load() }

// Buffered is how many events wait for the next flush.
func (l *Log) Buffered() int64 { return l.buffered.Load() }

func (l *Log) drop(n int) {
	total := l.dropped.Add(int64(n))
	now := time.Now().UnixNano()
	last := l.warnedAt.Load()
	if now-last < int64(l.opts.FlushInterval) || !l.warnedAt.CompareAndSwap(last, now) {
		return
	}
	since := total - l.droppedAt.Swap(total)
	l.opts.Logger.Warn("audit log: events dropped: the buffer is full or the store does not take them",
		"dropped", since, "dropped_total", total, "max_buffered", l.opts.MaxBuffered)
}

func (l *Log) run() {
	defer close(l.stopped)
	tick := time.NewTicker(l.opts.FlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		case <-l.kick:
		}
		_ = l.Flush(l.runCtx) // a failure is logged; its events wait for the next

	}
}

// Flush writes every buffered event now: first the batch of a flush that
// failed, as it was, then the events recorded since. A batch that fails is
// kept for the next flush while the buffer has room; what is recorded
// meanwhile waits until it is written.
func (l *Log) Flush(ctx context.Context) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	retry := l.failed
	l.mu.Unlock()
	if len(retry) > 0 {
		if err := l.write(ctx, retry); err != nil {
			l.opts.Logger.Warn("audit log: writing the events of a failed flush failed again; kept for the next flush",
				"events", len(retry), "error", err)
			return err
		}
		l.mu.Lock()
		l.failed = nil
		l.mu.Unlock()
	}
	l.mu.Lock()
	batch := l.buf
	l.buf = nil
	l.buffered.Store(0)
	l.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	// A recipient's events side by side: a store writes them together.
	slices.SortStableFunc(batch, func(a, b Event) int {
		return strings.Compare(a.Recipient+a.Key, b.Recipient+b.Key)
	})
	err := l.write(ctx, batch)
	if err == nil {
		return nil
	}
	l.mu.Lock()
	room := 0
	if !l.closed {
		room = max(l.opts.MaxBuffered-len(l.buf), 0)
	}
	// What is kept is the batch's beginning: every write of it that may
	// have been stored is written again alike, or not at all.
	l.failed = batch[:min(room, len(batch))]
	kept := len(l.failed)
	l.buffered.Store(int64(kept + len(l.buf)))
	l.mu.Unlock()
	if lost := len(batch) - kept; lost > 0 {
		l.drop(lost)
	}
	l.opts.Logger.Warn("audit log: writing buffered events failed; kept for the next flush while there is room",
		"events", len(batch), "kept", kept, "error", err)
	return err
}

// write hands events to the Writer, within flushTimeout.
func (l *Log) write(ctx context.Context, events []Event) error {
	wctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	return l.w.AppendAudit(wctx, events)
}

// Close stops the periodic flushes and writes what is buffered, within ctx
// (a flush under way is cut off when ctx ends). What is not written by then,
// and events recorded afterwards, are dropped.
func (l *Log) Close(ctx context.Context) error {
	first := false
	l.closeOnce.Do(func() { first = true })
	if !first {
		return nil
	}
	defer l.cancelRun()
	stopCutting := context.AfterFunc(ctx, l.cancelRun)
	defer stopCutting()
	close(l.stop)
	<-l.stopped
	err := l.Flush(ctx)
	l.mu.Lock()
	l.closed = true
	lost := len(l.failed) + len(l.buf)
	l.failed, l.buf = nil, nil
	l.mu.Unlock()
	if lost > 0 {
		l.drop(lost)
	}
	if err != nil {
		return errors.Join(errors.New("audit log: the last flush failed"), err)
	}
	return nil
}

func withKey(e Event) Event {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if e.Key == "" {
		e.Key = NewKey(e.At)
	}
	return e
}
