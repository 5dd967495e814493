// Package groupcommit lets many concurrent callers share one durable write,
// and overlaps the work of preparing the next write with waiting for the
// previous one to be durable.
//
// Requests queue up; one goroutine takes all that are queued (up to a
// weight limit) as a group and prepares it: checks it, and starts its write.
// A second goroutine then finishes the groups in the same order: it waits
// until each is durable and answers its callers. While group N is being
// synced, group N+1 is already being prepared. What a prepared group wrote
// must not be shown to readers until its finish runs: only the caller knows
// how to keep it hidden until then.
//
// A store whose writes wait for round trips rather than for one disk can
// have several groups in flight (Options.Concurrent): groups that share no
// key (for the hub, a recipient) are prepared side by side, so that one slow
// key holds up only the requests that name it.
package groupcommit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("groupcommit: closed")

// Options configure a Pipeline.
type Options[T any] struct {
	// MaxWeight bounds a group's total weight; a request heavier than it
	// still forms a group of its own. 0 means no bound.
	MaxWeight int
	// Weight of a request; nil means 1 each.
	Weight func(T) int
	// Prepare runs for each group, one at a time and in order, on the
	// collecting goroutine. It returns what finishes the group (waiting for
	// durability, answering the callers), or nil when nothing is left to do.
	Prepare func(group []T) (finish func())
	// Ahead is how many prepared groups may wait to be finished besides the
	// one being finished and the one being prepared. 0 suits most: while a
	// group finishes, one more is prepared and then waits, so the requests
	// that arrive meanwhile form one large group rather than many small ones.
	Ahead int
	// Concurrent is how many groups may be in flight at once; 0 or 1 means
	// one at a time, as described above. With more, each group is prepared
	// and then finished on a goroutine of its own, and Keys decides which
	// requests may be in flight together.
	Concurrent int
	// Keys names what a request writes; only read when Concurrent > 1.
	// Groups in flight at once share no key, and a request waits for every
	// earlier one that shares a key with it: it joins the same group or one
	// started after that one ended, so requests that share a key are
	// prepared in the order they were submitted. A request with no keys
	// waits for nothing. Each key is named once. The queue bounds each key's
	// waiting requests rather than all of them: Submit for a key with a
	// full queue waits, in the order it came, while other keys' requests
	// go on.
	Keys func(T) []string
}

// Pipeline is a running group committer.
type Pipeline[T any] struct {
	opts     Options[T]
	in       chan queued[T]
	finishes chan func()
	done     chan struct{}

	closeMu sync.RWMutex // guards sends on in against Close
	closed  bool

	room    *room        // with Concurrent > 1: each key's share of the queue
	waiting atomic.Int64 // with Concurrent > 1: requests not yet in a group
}

// New starts a pipeline with a queue of queue requests (with
// Options.Concurrent above 1, queue requests per key).
func New[T any](queue int, opts Options[T]) *Pipeline[T] {
	if opts.Weight == nil {
		opts.Weight = func(T) int { return 1 }
	}
	p := &Pipeline[T]{
		opts:     opts,
		in:       make(chan queued[T], queue),
		finishes: make(chan func(), opts.Ahead),
		done:     make(chan struct{}),
	}
	if opts.Concurrent > 1 {
		p.room = newRoom(queue)
		go p.collectConcurrently()
		return p
	}
	go p.collect()
	go p.finish()
	return p
}

// Submit queues req. It fails with ctx's error if ctx ends before req is
// queued, and with ErrClosed after Close; once it returns nil, req will be
// prepared (and finished) even if Close follows.
func (p *Pipeline[T]) Submit(ctx context.Context, req T) error {
	if p.room == nil {
		return p.send(ctx, queued[T]{req: req})
	}
	q := queued[T]{req: req, keys: p.opts.Keys(req)}
	if err := p.room.enter(ctx, q.keys); err != nil {
		return err
	}
	p.waiting.Add(1)
	if err := p.send(ctx, q); err != nil {
		p.waiting.Add(-1)
		p.room.leave(q.keys)
		return err
	}
	return nil
}

// send queues q unless the pipeline is closed.
func (p *Pipeline[T]) send(ctx context.Context, q queued[T]) error {
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	select {
	case p.in <- q:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Queued is how many submitted requests wait to be taken into a group: with
// one group at a time, those that the next group will take (up to the
// weight limit) while the current one is prepared.
func (p *Pipeline[T]) Queued() int {
	if p.room != nil {
		return int(p.waiting.Load())
	}
	return len(p.in)
}

// Flush waits until every group prepared so far has finished. Only Prepare
// may call it: it is how a group that found a conflict waits for the state
// it conflicted with to settle. It is for one group at a time only: with
// Options.Concurrent above 1 it never returns.
func (p *Pipeline[T]) Flush() {
	settled := make(chan struct{})
	p.finishes <- func() { close(settled) }
	<-settled
}

// Close refuses new requests, prepares and finishes the queued ones and
// returns when all are finished, every group in flight included.
func (p *Pipeline[T]) Close() {
	p.closeMu.Lock()
	if !p.closed {
		p.closed = true
		close(p.in)
	}
	p.closeMu.Unlock()
	<-p.done
}

func (p *Pipeline[T]) collect() {
	defer close(p.finishes)
	var carry T
	carried := false
	for {
		first := carry
		if carried {
			carried = false
		} else {
			q, ok := <-p.in
			if !ok {
				return
			}
			first = q.req
		}
		group := []T{first}
		weight := p.opts.Weight(first)
	fill:
		for p.opts.MaxWeight == 0 || weight < p.opts.MaxWeight {
			select {
			case q, ok := <-p.in:
				if !ok {
					break fill
				}
				req := q.req
				w := p.opts.Weight(req)
				if p.opts.MaxWeight > 0 && weight+w > p.opts.MaxWeight {
					carry, carried = req, true
					break fill
				}
				group = append(group, req)
				weight += w
			default:
				break fill
			}
		}
		if finish := p.opts.Prepare(group); finish != nil {
			p.finishes <- finish
		}
	}
}

func (p *Pipeline[T]) finish() {
	defer close(p.done)
	for f := range p.finishes {
		f()
	}
}
