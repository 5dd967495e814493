package hub

import (
	"context"
	"sync"
)

// sharer lets identical concurrent calls share one execution without ever
// handing a caller an answer read before that caller started: a caller only
// joins an execution that has not begun yet. While one execution of a key
// runs, callers that arrive gather behind it and share the next one, which
// begins when the running one ends. So N concurrent pollers of one key cost
// at most two executions at a time, and every answer reflects every write
// that returned before its caller arrived.
type sharer[T any] struct {
	mu      sync.Mutex
	running map[string]*execution[T] // begun, not yet ended
	waiting map[string]*execution[T] // gathering callers, not yet begun
}

type execution[T any] struct {
	done chan struct{}
	val  T
	err  error
}

func newSharer[T any]() *sharer[T] {
	return &sharer[T]{running: map[string]*execution[T]{}, waiting: map[string]*execution[T]{}}
}

// do returns the result of an execution of fn that began after this call
// did. fn runs detached from the caller (spawn starts it, so the owner can
// track and cancel it); a caller that gives up returns ctx.Err() and leaves
// the execution to the others.
func (s *sharer[T]) do(ctx context.Context, key string, spawn func(func()), fn func() (T, error)) (T, error) {
	s.mu.Lock()
	e, ok := s.waiting[key]
	if !ok {
		e = &execution[T]{done: make(chan struct{})}
		s.waiting[key] = e
		ahead := s.running[key]
		spawn(func() { s.run(key, e, ahead, fn) })
	}
	s.mu.Unlock()

	select {
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	case <-e.done:
		return e.val, e.err
	}
}

// run waits for the execution ahead of e (if any), then begins e: from this
// moment no caller can join it any more.
func (s *sharer[T]) run(key string, e, ahead *execution[T], fn func() (T, error)) {
	if ahead != nil {
		<-ahead.done
	}
	s.mu.Lock()
	delete(s.waiting, key)
	s.running[key] = e
	s.mu.Unlock()

	e.val, e.err = fn()

	s.mu.Lock()
	delete(s.running, key) // whoever runs next waits for e.done
	s.mu.Unlock()
	close(e.done)
}
