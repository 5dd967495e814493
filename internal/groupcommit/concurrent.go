package groupcommit

import (
	"context"
	"slices"
	"sync"
)

// queued is a request waiting for its group, with its keys.
type queued[T any] struct {
	req  T
	keys []string
}

// collectConcurrently is collect for Options.Concurrent > 1: it starts a
// group whenever one is allowed and a request is free to go, and the group
// is prepared and finished on its own goroutine.
func (p *Pipeline[T]) collectConcurrently() {
	defer close(p.done)
	var (
		waiting  []queued[T]
		busy     = make(map[string]bool) // keys of the groups in flight
		inFlight int
		ended    = make(chan []string) // the keys of a group that finished
		in       = p.in
	)
	// Every submitted request is taken off the queue at once: the room
	// bounds what waits, per key, so that the requests of a busy key never
	// keep another key's from being seen.
	for in != nil || len(waiting) > 0 || inFlight > 0 {
		for inFlight < p.opts.Concurrent {
			var taken []queued[T]
			var keys []string
			if taken, keys, waiting = p.nextGroup(waiting, busy); len(taken) == 0 {
				break
			}
			group := make([]T, len(taken))
			for i, q := range taken {
				group[i] = q.req
				p.room.leave(q.keys)
			}
			p.waiting.Add(-int64(len(taken)))
			for _, k := range keys {
				busy[k] = true
			}
			inFlight++
			go func() {
				if finish := p.opts.Prepare(group); finish != nil {
					finish()
				}
				ended <- keys
			}()
		}
		select {
		case q, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			waiting = append(waiting, q)
			// What is queued already goes into the same round, so that
			// requests arriving together can share a group.
		drain:
			for {
				select {
				case q, ok := <-in:
					if !ok {
						in = nil
						break drain
					}
					waiting = append(waiting, q)
				default:
					break drain
				}
			}
		case keys := <-ended:
			inFlight--
			for _, k := range keys {
				delete(busy, k)
			}
		}
	}
}

// nextGroup takes the next group from waiting, in order: the requests none
// of whose keys is busy or named by an earlier request that stays behind,
// up to the weight limit (the first one whatever its weight). It returns
// the group, its keys and the requests left waiting, in their order.
func (p *Pipeline[T]) nextGroup(waiting []queued[T], busy map[string]bool) (group []queued[T], keys []string, rest []queued[T]) {
	held := make(map[string]bool) // keys of earlier requests that stay behind
	taken := make(map[string]bool)
	weight := 0
	rest = waiting[:0:0]
	for _, q := range waiting {
		if !slices.ContainsFunc(q.keys, func(k string) bool { return busy[k] || held[k] }) {
			w := p.opts.Weight(q.req)
			if len(group) == 0 || p.opts.MaxWeight == 0 || weight+w <= p.opts.MaxWeight {
				group = append(group, q)
				weight += w
				for _, k := range q.keys {
					if !taken[k] {
						taken[k] = true
						keys = append(keys, k)
					}
				}
				continue
			}
		}
		rest = append(rest, q)
		for _, k := range q.keys {
			held[k] = true
		}
	}
	return group, keys, rest
}

// room bounds, per key, the requests submitted and not yet taken into a
// group. One busy key's requests then fill only their own share and a
// request for another key still reaches the collector, while what waits
// stays bounded by the keys that have requests waiting.
type room struct {
	size  int
	mu    sync.Mutex
	slots map[string]*slots
}

// slots is one key's share of the queue.
type slots struct {
	// taken holds a token per request in the share. Submit calls blocked
	// sending on it are let in in the order they came, so no request of a
	// full key is overtaken by a later one of the same key.
	taken chan struct{}
	users int // requests holding a token or waiting for one
}

func newRoom(size int) *room {
	return &room{size: max(size, 1), slots: make(map[string]*slots)}
}

// shareOf is what a request's keys take a token of: requests with no keys
// share the share of the empty key, so that they too are bounded.
func shareOf(keys []string) []string {
	if len(keys) == 0 {
		return []string{""}
	}
	return keys
}

// enter takes a token of each of keys, waiting for a full key's share to
// have room; it fails with ctx's error, holding none, if ctx ends first.
// The tokens are taken in the keys' order, whatever order the request names
// them in: a request holding x's while it waits for y's, and another
// holding y's while it waits for x's, would each wait for the other for
// good once both shares are full.
func (r *room) enter(ctx context.Context, keys []string) error {
	keys = slices.Sorted(slices.Values(shareOf(keys)))
	for i, k := range keys {
		r.mu.Lock()
		s, ok := r.slots[k]
		if !ok {
			s = &slots{taken: make(chan struct{}, r.size)}
			r.slots[k] = s
		}
		s.users++
		r.mu.Unlock()
		select {
		case s.taken <- struct{}{}:
			continue
		default:
		}
		select {
		case s.taken <- struct{}{}:
		case <-ctx.Done():
			r.mu.Lock()
			r.drop(k, s)
			r.mu.Unlock()
			r.release(keys[:i])
			return ctx.Err()
		}
	}
	return nil
}

// leave gives back the tokens a request with keys took.
func (r *room) leave(keys []string) { r.release(shareOf(keys)) }

// release gives back a token of each of shares.
func (r *room) release(shares []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range shares {
		s := r.slots[k]
		<-s.taken
		r.drop(k, s)
	}
}

// drop forgets one user of k's share, and the share once it has none;
// r.mu is held.
func (r *room) drop(k string, s *slots) {
	if s.users--; s.users == 0 {
		delete(r.slots, k)
	}
}
