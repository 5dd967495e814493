package groupcommit

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// keyed is a request of the concurrent tests: a name and the keys it writes.
type keyed struct {
	name string
	keys []string
}

// gates is a pipeline whose groups each report their names when prepared
// and then wait until the test opens the gate of their first request.
type gates struct {
	t        *testing.T
	p        *Pipeline[keyed]
	prepared chan []string
	mu       sync.Mutex
	open     map[string]chan struct{}
	allOpen  bool // after the test: every gate opens, so that Close returns
	inFlight atomic.Int64
	most     atomic.Int64
}

func newGates(t *testing.T, concurrent int) *gates {
	g := &gates{t: t, prepared: make(chan []string, 64), open: make(map[string]chan struct{})}
	g.p = New(16, Options[keyed]{
		Concurrent: concurrent,
		Keys:       func(k keyed) []string { return k.keys },
		Prepare: func(group []keyed) func() {
			n := g.inFlight.Add(1)
			for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
			}
			names := make([]string, len(group))
			for i, k := range group {
				names[i] = k.name
			}
			g.prepared <- names
			<-g.gate(group[0].name)
			return func() { g.inFlight.Add(-1) }
		},
	})
	t.Cleanup(func() {
		g.mu.Lock()
		g.allOpen = true
		for _, ch := range g.open {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
		g.mu.Unlock()
		g.p.Close()
	})
	return g
}

func (g *gates) gate(name string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch, ok := g.open[name]
	if !ok {
		ch = make(chan struct{})
		if g.allOpen {
			close(ch)
		}
		g.open[name] = ch
	}
	return ch
}

func (g *gates) submit(name string, keys ...string) {
	g.t.Helper()
	if err := g.p.Submit(context.Background(), keyed{name: name, keys: keys}); err != nil {
		g.t.Fatal(err)
	}
}

func (g *gates) release(name string) { close(g.gate(name)) }

// next waits for the next group to be prepared and checks its names.
func (g *gates) next(want ...string) {
	g.t.Helper()
	select {
	case got := <-g.prepared:
		if !slices.Equal(got, want) {
			g.t.Fatalf("prepared group %v, want %v", got, want)
		}
	case <-time.After(time.Minute): // only against a hang
		g.t.Fatalf("group %v was not prepared", want)
	}
}

// A group whose keys are free is prepared while another is still in
// flight, and a request for a busy key waits for its group to end.
func TestGroupsWithOtherKeysAreInFlightAtOnce(t *testing.T) {
	g := newGates(t, 4)
	g.submit("a1", "x")
	g.next("a1")
	g.submit("a2", "x")
	g.submit("b", "y")
	g.next("b") // while a1 is still in flight; a2 waits for it
	g.release("b")
	g.release("a1")
	g.next("a2")
	g.release("a2")
}

// A request waiting for a busy key holds its other keys too: a later
// request naming one of them must not be prepared before it.
func TestAWaitingRequestHoldsItsKeysForLaterOnes(t *testing.T) {
	g := newGates(t, 4)
	g.submit("c1", "x")
	g.next("c1")
	g.submit("c2", "x", "y")
	g.submit("c3", "y")
	g.submit("d", "z")
	// d's group was formed after c3 was considered: had c3 been free it
	// would have gone first or with d.
	g.next("d")
	g.release("d")
	g.release("c1")
	g.next("c2", "c3")
	g.release("c2")
}

// No more than Concurrent groups are in flight, and Close waits for every
// one of them.
func TestConcurrentBoundsTheGroupsInFlightAndCloseWaitsForThem(t *testing.T) {
	g := newGates(t, 2)
	g.submit("a", "a")
	g.next("a")
	g.submit("b", "b")
	g.next("b")
	g.submit("c", "c")
	closed := make(chan struct{})
	go func() { g.p.Close(); close(closed) }()
	g.release("a")
	g.next("c")
	g.release("b")
	select {
	case <-closed:
		t.Fatal("Close returned while group c was in flight")
	default:
	}
	g.release("c")
	<-closed
	if most := g.most.Load(); most != 2 {
		t.Fatalf("%d groups in flight at most, want 2", most)
	}
	if n := g.inFlight.Load(); n != 0 {
		t.Fatalf("Close returned with %d groups unfinished", n)
	}
}

// A key whose requests fill the waiting bound holds up only its own: a
// request for another key is still prepared while that key's group is in
// flight.
func TestAKeyThatFillsTheQueueHoldsUpOnlyItsOwnRequests(t *testing.T) {
	g := newGates(t, 8)
	g.submit("x0", "x")
	g.next("x0")
	for i := range cap(g.p.in) {
		g.submit("x"+strconv.Itoa(i+1), "x")
	}
	g.submit("y", "y")
	g.next("y") // while x0 is still in flight
	g.release("y")
	g.release("x0")
	want := make([]string, cap(g.p.in))
	for i := range want {
		want[i] = "x" + strconv.Itoa(i+1)
	}
	g.next(want...)
	g.release("x1")
}

// The queue still bounds each key's waiting requests: one more for a full
// key waits in Submit, holding no other key's share if it gives up, and
// goes once the key's waiting requests are taken into a group.
func TestTheQueueBoundsEachKeysWaitingRequests(t *testing.T) {
	g := newGates(t, 8)
	g.submit("x0", "x")
	g.next("x0")
	want := make([]string, cap(g.p.in))
	for i := range want {
		want[i] = "x" + strconv.Itoa(i+1)
		g.submit(want[i], "x")
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.p.Submit(ended, keyed{name: "yx", keys: []string{"y", "x"}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit for a full key = %v, want %v", err, context.Canceled)
	}
	if n := g.p.Queued(); n != len(want) {
		t.Fatalf("Queued() = %d, want %d", n, len(want))
	}
	g.p.room.mu.Lock()
	shares := slices.Collect(maps.Keys(g.p.room.slots))
	g.p.room.mu.Unlock()
	if !slices.Equal(shares, []string{"x"}) {
		t.Fatalf("shares in use %q, want only x's", shares)
	}
	g.submit("y", "y")
	g.next("y")
	g.release("y")
	late := make(chan error, 1)
	go func() { late <- g.p.Submit(context.Background(), keyed{name: "late", keys: []string{"x"}}) }()
	g.release("x0")
	g.next(want...)
	if err := <-late; err != nil {
		t.Fatal(err)
	}
	g.release("x1")
	g.next("late")
	g.release("late")
}

// Requests naming the same keys in other orders never hold each other's
// shares: with both keys' shares full, requests naming x then y and
// requests naming y then x all get in once the shares empty, whichever
// share empties first.
func TestRequestsNamingKeysInOtherOrdersDoNotDeadlock(t *testing.T) {
	g := newGates(t, 8)
	g.submit("x0", "x")
	g.next("x0")
	g.submit("y0", "y")
	g.next("y0")
	size := cap(g.p.in)
	var xs, ys []string
	for i := range size {
		xs, ys = append(xs, "x"+strconv.Itoa(i+1)), append(ys, "y"+strconv.Itoa(i+1))
		g.submit(xs[i], "x")
		g.submit(ys[i], "y")
	}
	// users is how many requests hold or wait for a token of k's share.
	users := func(k string) int {
		g.p.room.mu.Lock()
		defer g.p.room.mu.Unlock()
		if s, ok := g.p.room.slots[k]; ok {
			return s.users
		}
		return 0
	}
	// waitFor waits until the shares of x and y have n users in all.
	waitFor := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); users("x")+users("y") < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) { // only against a hang
				t.Fatalf("%d requests use x's share and %d y's, want %d in all", users("x"), users("y"), n)
			}
		}
	}
	entered := make(chan error, 2*size)
	for i := range size {
		go func() {
			entered <- g.p.Submit(context.Background(), keyed{name: "xy" + strconv.Itoa(i), keys: []string{"x", "y"}})
		}()
	}
	waitFor(3 * size)
	for i := range size {
		go func() {
			entered <- g.p.Submit(context.Background(), keyed{name: "yx" + strconv.Itoa(i), keys: []string{"y", "x"}})
		}()
	}
	waitFor(4 * size)
	// The x share empties first, then the y share; then the groups that
	// held the keys meanwhile end.
	g.release("x0")
	g.next(xs...)
	g.release("y0")
	g.next(ys...)
	g.release(xs[0])
	g.release(ys[0])
	for range 2 * size {
		select {
		case err := <-entered:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute): // only against a hang
			t.Fatalf("requests naming x and y in other orders wait for each other: x's share has %d users, y's %d", users("x"), users("y"))
		}
	}
}
