package hub

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// A caller that arrives while an execution runs must not get that
// execution's answer: it waits for the next one, which it shares with every
// other caller that arrived meanwhile.
func TestSharerNeverHandsOutAnAnswerBegunBeforeTheCaller(t *testing.T) {
	s := newSharer[int]()
	var calls atomic.Int32
	release := []chan struct{}{make(chan struct{}), make(chan struct{})}
	began := make(chan int, 2)
	fn := func() (int, error) {
		n := int(calls.Add(1))
		began <- n
		<-release[n-1]
		return n, nil
	}
	var wg sync.WaitGroup
	spawn := func(f func()) { wg.Go(f) }
	ctx := context.Background()

	got := make([]int, 3)
	var callers sync.WaitGroup
	callers.Go(func() { got[0], _ = s.do(ctx, "k", spawn, fn) })
	if n := <-began; n != 1 {
		t.Fatalf("first execution is number %d", n)
	}
	// Two callers arrive, one after the other, after execution 1 began; each
	// is known to be waiting once it asks its context for Done.
	for i := 1; i <= 2; i++ {
		waiting := &doneWatcher{Context: ctx, asked: make(chan struct{})}
		callers.Go(func() { got[i], _ = s.do(waiting, "k", spawn, fn) })
		<-waiting.asked
	}
	close(release[0])
	if n := <-began; n != 2 {
		t.Fatalf("second execution is number %d", n)
	}
	close(release[1])
	callers.Wait()
	wg.Wait()

	if got[0] != 1 || got[1] != 2 || got[2] != 2 {
		t.Fatalf("answers %v, want [1 2 2]: later callers must share one execution begun after them", got)
	}
	if c := calls.Load(); c != 2 {
		t.Fatalf("%d executions for three callers, want 2", c)
	}
}

// doneWatcher tells when its caller starts waiting on it.
type doneWatcher struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func (w *doneWatcher) Done() <-chan struct{} {
	w.once.Do(func() { close(w.asked) })
	return w.Context.Done()
}
