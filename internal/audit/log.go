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
	// events are buffered, unless the last flush failed: the next one then
	// waits for the interval.
	FlushEvents int
	// MaxBuffered is the most events held for writing; more are dropped
	// (and counted) rather than hold up the calls that make them.
	MaxBuffered int
	Logger      *slog.Logger
	// after is time.After unless a test fires the timers itself.
	after func(time.Duration) <-chan time.Time
}

// Log writes audit events: Write at once (remedies, whose answer waits for
// it), Record in batches, so that an actor's call never waits for the audit
// log nor fails because of it. A flush hands every buffered event to the
// Writer in one call, ordered by recipient, which a store writes as one
// write per recipient; a flush or Write that failed is written again as it
// was, on its own, by the next flush, before the events recorded since.
// Close flushes what is left, and what the calls begun (Begin) record until
// they end.
type Log struct {
	w    Writer
	opts Options

	mu  sync.Mutex
	buf []Event
	// failed are the batches of flushes and Writes that failed, each as
	// it was written, oldest first; failedN counts their events. The next
	// flush writes each again on its own, so that a store writes it as the
	// same writes (on Cosmos DB the same documents, each named by its
	// first event's key, which a repeat finds when a lost answer hid that
	// it was created). With the events recorded since, an earlier key
	// among them would name another document, and its events would be
	// stored twice.
	failed    [][]Event
	failedN   int
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
	// calls counts the calls begun that have not ended (Begin); idle, set
	// while Close waits for them, is closed when none is left. Under mu.
	calls int
	idle  chan struct{}

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
	if opts.after == nil {
		opts.after = time.After
	}
	l := &Log{w: w, opts: opts, kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	l.runCtx, l.cancelRun = context.WithCancel(context.Background())
	go l.run()
	return l
}

// Write stores events before it returns: for a remedy, whose answer says
// it is recorded. Their keys are made here where they have none. Events it
// fails to store (the remedy took effect all the same) are kept, as a
// failed flush's are, and written by the next flush.
func (l *Log) Write(ctx context.Context, events ...Event) error {
	keyed := make([]Event, len(events))
	for i, e := range events {
		keyed[i] = withKey(e)
	}
	err := l.w.AppendAudit(ctx, keyed)
	if err != nil {
		kept := l.keep(keyed)
		l.opts.Logger.Warn("audit log: writing a remedy's events failed; kept for the next flush while there is room",
			"events", len(keyed), "kept", kept, "error", err)
	}
	return err
}

// Hold keeps the writer open for the events written with the context
// returned until release is called (Writer.Hold).
func (l *Log) Hold(ctx context.Context) (held context.Context, release func(), err error) {
	return l.w.Hold(ctx)
}

// Begin tells the log of a call that may record events; end, once it
// recorded them (or nothing). Close waits for the calls begun to end before
// its last flush: a call that a shutdown cut off may still end, and what it
// did is then recorded.
func (l *Log) Begin() (end func()) {
	l.mu.Lock()
	l.calls++
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.calls--; l.calls == 0 && l.idle != nil {
				close(l.idle)
				l.idle = nil
			}
		})
	}
}

// Record buffers e for the next flush and returns at once. A full buffer
// (MaxBuffered) or a closed log drops it: it is counted (Dropped) and a
// warning is logged at most once per flush interval.
func (l *Log) Record(e Event) {
	e = withKey(e)
	l.mu.Lock()
	if l.closed || l.failedN+len(l.buf) >= l.opts.MaxBuffered {
		l.mu.Unlock()
		l.drop(1)
		return
	}
	l.buf = append(l.buf, e)
	n := len(l.buf)
	l.buffered.Store(int64(l.failedN + n))
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

// Buffered is how many events wait for the next flush: those recorded, and
// those of writes that failed.
func (l *Log) Buffered() int64 { return l.buffered.Load() }

func (l *Log) drop(n int) {
	total := l.dropped.Add(int64(n))
	now := time.Now().UnixNano()
	last := l.warnedAt.Load()
	if now-last < int64(l.opts.FlushInterval) || !l.warnedAt.CompareAndSwap(last, now) {
		return
	}
	since := total - l.droppedAt.Swap(total)
	l.opts.Logger.Warn("audit log: events dropped: the buffer is full, the store does not take them, or the log closed at shutdown",
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
		// A failure is logged; its events wait for the next flush, one
		// interval later. Not sooner: while a full batch waits, every event
		// recorded asks for a flush, and a store that refuses (full, or
		// throttling) would be asked again at once, over and over.
		for l.Flush(l.runCtx) != nil {
			select {
			case <-l.stop:
				return
			case <-l.opts.after(l.opts.FlushInterval):
			}
		}
	}
}

// Flush writes every buffered event now: first the batches that failed,
// each as it was, then the events recorded since. A batch that fails is
// kept for the next flush while the buffer has room; what is recorded
// meanwhile waits until it is written.
func (l *Log) Flush(ctx context.Context) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	for {
		// Only a flush removes a failed batch; Write may add one meanwhile.
		l.mu.Lock()
		if len(l.failed) == 0 {
			l.mu.Unlock()
			break
		}
		retry := l.failed[0]
		l.mu.Unlock()
		if err := l.write(ctx, retry); err != nil {
			l.opts.Logger.Warn("audit log: writing events that failed before failed again; kept for the next flush",
				"events", len(retry), "error", err)
			return err
		}
		l.mu.Lock()
		l.failed = l.failed[1:]
		l.failedN -= len(retry)
		l.buffered.Store(int64(l.failedN + len(l.buf)))
		l.mu.Unlock()
	}
	l.mu.Lock()
	batch := l.buf
	l.buf = nil
	l.buffered.Store(int64(l.failedN))
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
	kept := l.keep(batch)
	l.opts.Logger.Warn("audit log: writing buffered events failed; kept for the next flush while there is room",
		"events", len(batch), "kept", kept, "error", err)
	return err
}

// keep queues a batch that failed for the next flush, as much of its
// beginning as the buffer has room for (none once closed), and returns how
// many events it kept; the others are dropped. Its beginning: every write
// of it that may have been stored is written again alike, or not at all.
func (l *Log) keep(batch []Event) int {
	l.mu.Lock()
	room := 0
	if !l.closed {
		room = max(l.opts.MaxBuffered-l.failedN-len(l.buf), 0)
	}
	kept := min(room, len(batch))
	if kept > 0 {
		l.failed = append(l.failed, batch[:kept])
		l.failedN += kept
	}
	l.buffered.Store(int64(l.failedN + len(l.buf)))
	l.mu.Unlock()
	if lost := len(batch) - kept; lost > 0 {
		l.drop(lost)
	}
	return kept
}

// write hands events to the Writer, within flushTimeout.
func (l *Log) write(ctx context.Context, events []Event) error {
	wctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	return l.w.AppendAudit(wctx, events)
}

// Close stops the periodic flushes, writes what is buffered, waits for the
// calls begun to end and writes what they recorded, all within ctx (a flush
// under way is cut off when ctx ends). What is not written by then, and
// events recorded afterwards, are dropped; the calls still running are
// logged.
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
	// What is buffered first, so that a call that does not end costs it
	// nothing; what fails is kept, and written again with what the calls
	// recorded meanwhile.
	_ = l.Flush(ctx)
	l.awaitCalls(ctx)
	err := l.Flush(ctx)
	l.flushMu.Lock() // no flush under way takes a failed batch meanwhile
	l.mu.Lock()
	l.closed = true
	lost := l.failedN + len(l.buf)
	running := l.calls
	l.failed, l.failedN, l.buf = nil, 0, nil
	l.buffered.Store(0)
	l.mu.Unlock()
	l.flushMu.Unlock()
	if lost > 0 {
		l.drop(lost)
	}
	if running > 0 {
		l.opts.Logger.Warn("audit log: closed with calls still running; what they record is dropped and counted as dropped",
			"calls", running)
	}
	if err != nil {
		return errors.Join(errors.New("audit log: the last flush failed"), err)
	}
	return nil
}

// awaitCalls waits until no call begun is running, or ctx ends.
func (l *Log) awaitCalls(ctx context.Context) {
	l.mu.Lock()
	if l.calls == 0 {
		l.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	l.idle = idle
	l.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
	}
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
