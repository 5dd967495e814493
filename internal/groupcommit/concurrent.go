package groupcommit

import "slices"

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
	// Requests are taken off the queue into waiting up to its size, so that
	// a full queue still holds Submit back.
	limit := max(cap(p.in), 1)
	for in != nil || len(waiting) > 0 || inFlight > 0 {
		for inFlight < p.opts.Concurrent {
			var group []T
			var keys []string
			if group, keys, waiting = p.nextGroup(waiting, busy); len(group) == 0 {
				break
			}
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
		receive := in
		if len(waiting) >= limit {
			receive = nil
		}
		select {
		case req, ok := <-receive:
			if !ok {
				in = nil
				continue
			}
			waiting = append(waiting, queued[T]{req: req, keys: p.opts.Keys(req)})
			// What is queued already goes into the same round, so that
			// requests arriving together can share a group.
		drain:
			for len(waiting) < limit {
				select {
				case req, ok := <-in:
					if !ok {
						in = nil
						break drain
					}
					waiting = append(waiting, queued[T]{req: req, keys: p.opts.Keys(req)})
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
func (p *Pipeline[T]) nextGroup(waiting []queued[T], busy map[string]bool) (group []T, keys []string, rest []queued[T]) {
	held := make(map[string]bool) // keys of earlier requests that stay behind
	taken := make(map[string]bool)
	weight := 0
	rest = waiting[:0:0]
	for _, q := range waiting {
		if !slices.ContainsFunc(q.keys, func(k string) bool { return busy[k] || held[k] }) {
			w := p.opts.Weight(q.req)
			if len(group) == 0 || p.opts.MaxWeight == 0 || weight+w <= p.opts.MaxWeight {
				group = append(group, q.req)
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
