package audit_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/audit"
)

// sink is a Writer that keeps what it is given, can hold a write until the
// test lets it go, and fails while told to.
type sink struct {
	mu      sync.Mutex
	writes  [][]audit.Event
	refused [][]audit.Event // the writes failed while told to
	fail    error
	entered chan struct{} // told of every write that starts
	hold    chan struct{} // when set, writes wait for it to close
}

func newSink() *sink { return &sink{entered: make(chan struct{}, 100)} }

func (s *sink) Hold(ctx context.Context) (context.Context, func(), error) { return ctx, func() {}, nil }

func (s *sink) AppendAudit(ctx context.Context, events []audit.Event) error {
	s.entered <- struct{}{}
	s.mu.Lock()
	hold, fail := s.hold, s.fail
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done(): // as a store's request does
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if fail != nil {
		s.refused = append(s.refused, slices.Clone(events))
		return fail
	}
	s.writes = append(s.writes, slices.Clone(events))
	return nil
}

func (s *sink) events() []audit.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Concat(s.writes...)
}

func event(recipient string) audit.Event {
	return audit.Event{Action: audit.ActionPeek, Subject: recipient, Recipient: recipient, BundleID: uuid.NewString()}
}

// never is a flush interval no test waits for.
const never = time.Hour

// A flush writes every buffered event in one call, a recipient's events
// side by side, once FlushEvents are buffered.
func TestAFlushWritesTheBufferInOneCallGroupedByRecipient(t *testing.T) {
	s := newSink()
	l := audit.NewLog(s, audit.Options{FlushInterval: never, FlushEvents: 6})
	defer func() { _ = l.Close(context.Background()) }()
	a, b := uuid.NewString(), uuid.NewString()
	for _, r := range []string{a, b, a, b, a, b} {
		l.Record(event(r))
	}
	<-s.entered
	if err := l.Flush(context.Background()); err != nil { // waits for the flush under way
		t.Fatal(err)
	}
	s.mu.Lock()
	writes := s.writes
	s.mu.Unlock()
	if len(writes) != 1 || len(writes[0]) != 6 {
		t.Fatalf("writes %v; want one of 6 events", writes)
	}
	var order []string
	for _, e := range writes[0] {
		if e.Key == "" || e.At.IsZero() {
			t.Fatalf("an event written without key or time: %+v", e)
		}
		if len(order) == 0 || order[len(order)-1] != e.Recipient {
			order = append(order, e.Recipient)
		}
	}
	if len(order) != 2 {
		t.Fatalf("recipients in the order %v; want each one's events side by side", order)
	}
}

// The buffer is bounded: while the store holds a flush up, Record neither
// blocks nor grows the buffer beyond MaxBuffered; what does not fit is
// dropped, counted and warned about once per interval.
func TestAFullBufferDropsAndCountsWithoutBlocking(t *testing.T) {
	s := newSink()
	hold := make(chan struct{})
	s.hold = hold
	var logs bytes.Buffer
	l := audit.NewLog(s, audit.Options{FlushInterval: never, MaxBuffered: 5,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	r := uuid.NewString()
	for range 5 {
		l.Record(event(r)) // the fifth starts a flush, which the store holds
	}
	<-s.entered
	for range 5 + 3 {
		l.Record(event(r))
	}
	if got := l.Dropped(); got != 3 {
		t.Errorf("dropped %d; want 3", got)
	}
	if got := l.Buffered(); got != 5 {
		t.Errorf("buffered %d; want 5", got)
	}
	if n := strings.Count(logs.String(), "events dropped"); n != 1 {
		t.Errorf("%d warnings about drops; want one per interval:\n%s", n, logs.String())
	}
	close(hold)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(s.events()); got != 10 {
		t.Errorf("%d events written; want the 10 that fitted", got)
	}
}

// Close writes what is buffered; what is recorded afterwards is dropped.
func TestCloseFlushesTheBuffer(t *testing.T) {
	s := newSink()
	l := audit.NewLog(s, audit.Options{FlushInterval: never})
	for range 3 {
		l.Record(event(uuid.NewString()))
	}
	if len(s.events()) != 0 {
		t.Fatal("written before the interval or Close")
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(s.events()); got != 3 {
		t.Fatalf("%d events written at Close; want 3", got)
	}
	l.Record(event(uuid.NewString()))
	if l.Dropped() != 1 || len(s.events()) != 3 {
		t.Fatalf("a Record after Close: dropped %d, written %d; want it dropped", l.Dropped(), len(s.events()))
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// Events a failed flush did not store wait for the next one, which writes
// them again as they were, on their own, and the events recorded since in
// a write after them: a store writes the same batch as the same writes,
// which find what a write whose answer was lost stored. Merged with an
// event recorded since whose key is earlier, the batch would be other
// writes (on Cosmos DB, a document of another id, holding it again).
func TestAFailedFlushKeepsItsEventsForTheNext(t *testing.T) {
	s := newSink()
	s.fail = errors.New("the answer was lost")
	l := audit.NewLog(s, audit.Options{FlushInterval: never})
	defer func() { _ = l.Close(context.Background()) }()
	r := uuid.NewString()
	at := time.Now()
	first := event(r)
	first.At = at
	l.Record(first)
	if err := l.Flush(context.Background()); err == nil {
		t.Fatal("a flush the store refused succeeded")
	}
	s.mu.Lock()
	s.fail = nil
	s.mu.Unlock()
	earlier := event(r)
	earlier.At = at.Add(-time.Millisecond) // its call took its time before the flush
	l.Record(earlier)
	if got := l.Buffered(); got != 2 {
		t.Fatalf("buffered %d; want the failed flush's event and the new one", got)
	}
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	writes := s.writes
	s.mu.Unlock()
	if len(writes) != 2 || len(writes[0]) != 1 || writes[0][0].BundleID != first.BundleID ||
		len(writes[1]) != 1 || writes[1][0].BundleID != earlier.BundleID {
		t.Fatalf("writes %v; want the failed flush's event alone, then the new one", writes)
	}
	if l.Dropped() != 0 || l.Buffered() != 0 {
		t.Fatalf("dropped %d, buffered %d; want none", l.Dropped(), l.Buffered())
	}
}

// Write stores at once, with keys made for the events, whatever is
// buffered.
func TestWriteStoresBeforeItReturns(t *testing.T) {
	s := newSink()
	l := audit.NewLog(s, audit.Options{FlushInterval: never})
	defer func() { _ = l.Close(context.Background()) }()
	l.Record(event(uuid.NewString()))
	r := uuid.NewString()
	if err := l.Write(context.Background(), event(r), event(r)); err != nil {
		t.Fatal(err)
	}
	got := s.events()
	if len(got) != 2 || got[0].Key == "" || got[0].Key == got[1].Key {
		t.Fatalf("written %+v; want the two events, each with its own key", got)
	}
	if l.Buffered() != 1 {
		t.Fatalf("buffered %d; the recorded event waits for its flush", l.Buffered())
	}
}

// A remedy's record whose write failed (the remedy took effect) is kept,
// and written again as it was, on its own, by the next flush: it is not
// lost, and a write whose answer was lost after it stored them stores its
// events once.
func TestAWriteThatFailedIsWrittenAgainByTheNextFlush(t *testing.T) {
	s := newSink()
	s.fail = errors.New("the store is unreachable")
	l := audit.NewLog(s, audit.Options{FlushInterval: never})
	defer func() { _ = l.Close(context.Background()) }()
	r := uuid.NewString()
	remedy := []audit.Event{event(r), event(r)}
	for i := range remedy {
		remedy[i].Action = audit.ActionAcknowledgeOnBehalf
	}
	if err := l.Write(context.Background(), remedy...); err == nil {
		t.Fatal("a write the store refused succeeded")
	}
	s.mu.Lock()
	s.fail = nil
	refused := s.refused
	s.mu.Unlock()
	if len(refused) != 1 {
		t.Fatalf("refused writes %v; want the remedy's", refused)
	}
	if got := l.Buffered(); got != 2 {
		t.Fatalf("buffered %d; want the remedy's 2 events kept", got)
	}
	recorded := event(r)
	recorded.At = time.Now().Add(-time.Second)
	l.Record(recorded)
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	writes := s.writes
	s.mu.Unlock()
	if len(writes) != 2 || !slices.Equal(keys(writes[0]), keys(refused[0])) || len(writes[1]) != 1 || writes[1][0].BundleID != recorded.BundleID {
		t.Fatalf("writes %v; want the remedy's as it was refused %v, then the recorded event", writes, refused)
	}
	if l.Dropped() != 0 || l.Buffered() != 0 {
		t.Fatalf("dropped %d, buffered %d; want none", l.Dropped(), l.Buffered())
	}
}

func keys(events []audit.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Key
	}
	return out
}

// Keys sort as their times do, and a page cursor is checked.
func TestKeysSortByTime(t *testing.T) {
	base := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	var keys []string
	for i := range 50 {
		keys = append(keys, audit.NewKey(base.Add(time.Duration(i)*time.Millisecond)))
	}
	if !slices.IsSorted(keys) {
		t.Fatalf("keys out of order: %v", keys)
	}
	at, err := audit.ParseKey(keys[7])
	if err != nil || !at.Equal(base.Add(7*time.Millisecond)) {
		t.Fatalf("ParseKey: %v %v", at, err)
	}
	for _, bad := range []string{"", "x", keys[0][:10], strings.Replace(keys[0], "-", "+", 1), keys[0][:len(keys[0])-1] + "g"} {
		if _, err := audit.ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
	q := audit.Range("r", base.Add(time.Millisecond), base.Add(3*time.Millisecond), "", 10)
	for i, want := range []bool{false, true, true, false} {
		if q.Contains(keys[i]) != want {
			t.Errorf("[1ms, 3ms) contains the key at %d ms: %v", i, !want)
		}
	}
}

// A store that does not answer holds neither Record nor Close beyond its
// context: Close cuts the flush under way off, and what it could not write
// is counted as dropped.
func TestCloseIsBoundedByItsContextWhenTheStoreHangs(t *testing.T) {
	s := newSink()
	s.hold = make(chan struct{}) // never closed: the store does not answer
	l := audit.NewLog(s, audit.Options{FlushInterval: never, FlushEvents: 2})
	r := uuid.NewString()
	l.Record(event(r))
	l.Record(event(r)) // starts a flush that hangs
	<-s.entered
	l.Record(event(r))
	ctx, cancel := context.WithCancel(context.Background())
	closed := make(chan error, 1)
	go func() { closed <- l.Close(ctx) }()
	cancel() // the shutdown's deadline
	if err := <-closed; err == nil {
		t.Fatal("Close wrote nothing and said nothing")
	}
	if got := l.Dropped(); got != 3 {
		t.Fatalf("dropped %d; want the 3 events never written", got)
	}
}

// Events of one millisecond come back in the order they were made: the
// bundles of one acknowledgement on an actor's behalf (written together,
// all at the call's time), and an actor's Peek and the Dequeue that follows
// it within the millisecond. Stores return a recipient's events in key
// order.
func TestEventsOfOneMillisecondKeepTheOrderTheyWereMade(t *testing.T) {
	s := newSink()
	l := audit.NewLog(s, audit.Options{FlushInterval: never})
	defer func() { _ = l.Close(context.Background()) }()
	at := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	r := uuid.NewString()
	const n = 20
	var remedy []audit.Event
	for range n {
		e := event(r)
		e.At, e.Action = at, audit.ActionAcknowledgeOnBehalf
		remedy = append(remedy, e)
	}
	if err := l.Write(context.Background(), remedy...); err != nil {
		t.Fatal(err)
	}
	var recorded []audit.Event
	for i := range n {
		e := event(r)
		e.At, e.Action = at.Add(time.Millisecond), audit.Action(1+i%3) // Peek, PeekContent, Dequeue
		recorded = append(recorded, e)
		l.Record(e)
	}
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := s.events()
	slices.SortFunc(got, func(a, b audit.Event) int { return strings.Compare(a.Key, b.Key) })
	want := slices.Concat(remedy, recorded)
	if len(got) != len(want) {
		t.Fatalf("%d events stored, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].BundleID != want[i].BundleID {
			t.Fatalf("in key order, event %d is of bundle %s, made as event %d; want the order they were made in",
				i, got[i].BundleID, slices.IndexFunc(want, func(e audit.Event) bool { return e.BundleID == got[i].BundleID }))
		}
	}
}

// Close waits for the calls begun to end and writes what they recorded;
// those still running when its context ends are logged, and what they
// record afterwards is dropped and counted.
func TestCloseWaitsForTheCallsBegun(t *testing.T) {
	s := newSink()
	l := audit.NewLog(s, audit.Options{FlushInterval: never})
	r := uuid.NewString()
	end := l.Begin()
	closed := make(chan error, 1)
	go func() { closed <- l.Close(context.Background()) }()
	e := event(r)
	l.Record(e)
	end()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := s.events(); len(got) != 1 || got[0].BundleID != e.BundleID || l.Dropped() != 0 {
		t.Fatalf("stored %v, dropped %d; want the event of the call that ended during Close", got, l.Dropped())
	}

	var logged bytes.Buffer
	l = audit.NewLog(s, audit.Options{FlushInterval: never, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	end = l.Begin()
	defer end()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the shutdown's deadline
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged.String(), "calls still running") || !strings.Contains(logged.String(), "calls=1") {
		t.Fatalf("logged %q; want the call still running named", logged.String())
	}
	l.Record(event(r))
	if got := l.Dropped(); got != 1 {
		t.Fatalf("dropped %d; want the event recorded after Close", got)
	}
}
