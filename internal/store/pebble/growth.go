package pebble

// Growing the id index rebuilds its table at twice the size. Done in place,
// the writer would hold the index for the whole rebuild, a large fraction of
// a second at tens of millions of slots, while every save and dequeue
// waits. Instead, once the table is more than growAtEighths full, a goroutine
// prepares memory for a copy of it; the writer, at its next change, copies
// the table into it (a memory copy with no page faults,
// BenchmarkIDIndexChangesAcrossGrowth); the goroutine builds the
// larger table from the copy, while the writer goes on changing the table in
// use and notes each change. When the build is done, the writer replays the
// noted changes onto it and switches tables under the lock. The table in use
// always holds every entry, so lookups never miss one; a change that would
// fill it past 3/4 first waits for the build.

// growAtEighths is how full (in eighths) a table is when a larger one starts
// being prepared; at 3/4 changes wait for it.
const growAtEighths = 5

// growth is a larger table being built: memory for the copy (ready), the
// copy handed to the build (copied; nil calls it off), the result (done),
// and the changes made since the copy.
type growth struct {
	ready, copied chan []uint64
	done          chan *idIndex
	hasCopy       bool
	changes       []loggedChange
}

type loggedChange struct {
	entry  uint64
	remove bool
}

// growthBuilt, when set (by tests), is waited on by a build before it
// delivers its table.
var growthBuilt chan struct{}

// startGrowth starts the goroutine that builds a table of twice the size.
func (x *idIndex) startGrowth() {
	g := &growth{ready: make(chan []uint64, 1), copied: make(chan []uint64, 1), done: make(chan *idIndex, 1)}
	x.next = g
	n, gate := len(x.slots), growthBuilt
	go func() {
		buf := allocSlots(n)
		for i := 0; i < len(buf); i += pageSlots {
			buf[i] = 0 // the page is mapped here, not during the writer's copy
		}
		g.ready <- buf
		snapshot := <-g.copied
		if snapshot == nil {
			freeSlots(buf)
			return
		}
		t := &idIndex{slots: allocSlots(2 * n)}
		for _, e := range snapshot {
			if e != 0 {
				t.insert(e)
			}
		}
		freeSlots(snapshot)
		if gate != nil {
			<-gate
		}
		g.done <- t
	}()
}

// pageSlots is the number of slots in a 4 KiB page.
const pageSlots = 4096 / 8

// copyForGrowth copies the table for the build once memory for it is ready
// (with wait, waiting for it). Only the writer, which calls it, changes
// slots, so it reads them without the lock.
func (x *idIndex) copyForGrowth(wait bool) {
	g := x.next
	if g == nil || g.hasCopy {
		return
	}
	buf, ok := receive(g.ready, wait)
	if !ok {
		return
	}
	copy(buf, x.slots)
	g.hasCopy = true
	g.copied <- buf
}

// record notes a change made to the table in use since the copy, in the
// order change applied it: removals, then additions.
func (g *growth) record(add, remove []uint64) {
	if !g.hasCopy {
		return // the copy, when made, will hold it
	}
	for _, e := range remove {
		g.changes = append(g.changes, loggedChange{entry: e, remove: true})
	}
	for _, e := range add {
		g.changes = append(g.changes, loggedChange{entry: e})
	}
}

// finishGrowth switches to the larger table if it is built (with wait, once
// it is), after replaying onto it the changes made since the copy.
func (x *idIndex) finishGrowth(wait bool) {
	x.copyForGrowth(wait)
	g := x.next
	if g == nil || !g.hasCopy {
		return
	}
	t, ok := receive(g.done, wait)
	if !ok {
		return
	}
	x.next = nil
	adds := 0
	for _, c := range g.changes {
		if !c.remove {
			adds++
		}
	}
	if need := t.count + adds; need > len(t.slots)*3/4 {
		t.grow(need)
	}
	for _, c := range g.changes {
		if c.remove {
			t.remove(c.entry)
		} else {
			t.insert(c.entry)
		}
	}
	x.mu.Lock()
	old := x.slots
	x.slots, x.count = t.slots, t.count
	x.mu.Unlock()
	go freeSlots(old) // no reader can hold it: they take the lock
}

// stopGrowth calls off a growth under way and returns its memory. The
// writer must have stopped.
func (x *idIndex) stopGrowth() {
	g := x.next
	if g == nil {
		return
	}
	x.next = nil
	if g.hasCopy {
		freeSlots((<-g.done).slots)
		return
	}
	g.copied <- nil
}

// receive takes a value from c: with wait, once there is one; without, only
// if there is one now.
func receive[T any](c chan T, wait bool) (T, bool) {
	if wait {
		return <-c, true
	}
	select {
	case v := <-c:
		return v, true
	default:
		var zero T
		return zero, false
	}
}
