package audit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// gatedStore is the embedded store behind a gate: every audit write that
// reaches it is told to the test (its number of events) and waits until
// the test lets it through.
type gatedStore struct {
	*pebble.Store
	attempts chan int
	proceed  chan struct{}
}

func (g *gatedStore) AppendAudit(ctx context.Context, events []audit.Event) error {
	g.attempts <- len(events)
	<-g.proceed
	return g.Store.AppendAudit(ctx, events)
}

func (g *gatedStore) Hold(ctx context.Context) (context.Context, func(), error) {
	return ctx, func() {}, nil
}

// refusingStore opens an embedded store that refuses every write as on a
// volume full at start.
func refusingStore(t *testing.T) *pebble.Store {
	t.Helper()
	dir := t.TempDir()
	s, err := pebble.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = pebble.OpenWith(dir, nil, pebble.Options{ReadOnly: domain.ErrStorageFull}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// While the store refuses audit writes, flushes are paced by the flush
// interval however many events wait: a full batch waiting does not start a
// flush at once after one the store refused, and the events stay buffered
// (up to MaxBuffered) for the flush after the interval.
func TestAStoreThatRefusesIsAskedAgainOnlyAfterTheInterval(t *testing.T) {
	g := &gatedStore{Store: refusingStore(t), attempts: make(chan int, 100), proceed: make(chan struct{})}
	timers := make(chan chan time.Time, 100)
	opts := audit.Options{FlushInterval: never}
	audit.SetAfter(&opts, func(time.Duration) <-chan time.Time {
		c := make(chan time.Time, 1)
		timers <- c
		return c
	})
	l := audit.NewLog(g, opts)
	var once bool
	letThrough := func() {
		if !once {
			once = true
			close(g.proceed)
		}
	}
	defer func() { letThrough(); _ = l.Close(context.Background()) }()
	r := uuid.NewString()
	record := func(n int) {
		for range n {
			l.Record(event(r))
		}
	}

	record(audit.DefaultFlushEvents) // starts a flush
	if n := <-g.attempts; n != audit.DefaultFlushEvents {
		t.Fatalf("the first flush wrote %d events; want %d", n, audit.DefaultFlushEvents)
	}
	waiting := audit.DefaultFlushEvents
	for round := range 3 {
		record(2 * audit.DefaultFlushEvents) // a full batch waits, and more
		waiting += 2 * audit.DefaultFlushEvents
		g.proceed <- struct{}{} // the flush under way is refused
		var timer chan time.Time
		select {
		case n := <-g.attempts:
			t.Fatalf("round %d: a flush of %d events started at once after the store refused one", round, n)
		case timer = <-timers:
		}
		if got := l.Buffered(); got != int64(waiting) || l.Dropped() != 0 {
			t.Fatalf("round %d: buffered %d, dropped %d; want %d buffered, none dropped", round, got, l.Dropped(), waiting)
		}
		timer <- time.Now() // the interval is up
		if n := <-g.attempts; n != audit.DefaultFlushEvents {
			t.Fatalf("round %d: the flush after the interval wrote %d events; want the refused batch of %d as it was",
				round, n, audit.DefaultFlushEvents)
		}
	}
	letThrough()
	if err := l.Close(context.Background()); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("Close: %v; want the refusal", err)
	}
	if got := l.Dropped(); got != int64(waiting) {
		t.Fatalf("dropped %d at Close; want the %d events never written", got, waiting)
	}
}
