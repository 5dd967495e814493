package cosmos

import (
	"sync"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// drains lets the first Peek after this instance dequeued everything a
// recipient had waiting be answered by the primary read of the head alone,
// as a head marked idle is (headDoc.idle), without writing the mark: what
// this instance itself saw proves it. A Peek's full load (store.MayBeIdle,
// anchored) that finds nothing pending, no save under way and one cabinet
// alone with positions after its cursor is remembered; a bundle created on
// that cursor's version that takes every one of those positions, and then
// acknowledged, leaves the recipient with nothing pending and nothing
// waiting at the head version that load read. Only a save makes
// notifications wait again, and every save changes the head first (it
// raises Next in the batch that takes its positions), so a head still at
// that version hides nothing. Another bundle cannot come in between: it
// could only be cut from those positions, and would hold the group's slot
// (the creation fails) or have moved the cursor (it fails too), and a
// release needs a pending bundle, which the acknowledge leaves none of.
// The knowledge is this instance's memory only: it costs no request, and
// what is lost or forgotten only costs a Peek its full load.
type drains struct {
	mu sync.Mutex
	// loads: per recipient, the last Peek's load in which one cabinet
	// alone waits (none when the last one was not such).
	loads map[string]drainLoad
	// cuts: per recipient, the bundle created that takes all of it.
	cuts map[string]drainCut
	// idle: per recipient, the head version at which nothing waits.
	idle map[string]string
}

// drainLoad is what a Peek's load showed of a recipient whose one cabinet
// alone waits.
type drainLoad struct {
	head   string // the head's etag
	key    catalog.Key
	cursor string // the cabinet's cursor's etag; empty: no cursor stored
	acked  int64
	end    int64 // the end of the last position its runs hold
}

// drainCut is a bundle that takes everything a drainLoad showed waiting.
type drainCut struct {
	bundle string
	head   string
}

// maxDrains bounds each of the maps: an entry is a few dozen bytes, and
// one forgotten only costs a Peek its full load.
const maxDrains = 4096

// put sets m[recipient] = v, forgetting any one other entry when m is full.
func put[V any](m map[string]V, recipient string, v V) {
	if _, ok := m[recipient]; !ok && len(m) >= maxDrains {
		for r := range m { // any one: map order is random
			delete(m, r)
			break
		}
	}
	m[recipient] = v
}

// loaded notes the state of a Peek's full load of the recipient, read with
// its head on the primary (head is its etag).
func (d *drains) loaded(recipient, head string, st store.RecipientState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.loads == nil {
		d.loads, d.cuts, d.idle = map[string]drainLoad{}, map[string]drainCut{}, map[string]string{}
	}
	l, ok := oneWaiting(head, st)
	if !ok {
		delete(d.loads, recipient)
		return
	}
	put(d.loads, recipient, l)
}

// oneWaiting says whether st, loaded at head, has nothing pending, no save
// under way and exactly one cabinet with positions after its cursor, and
// returns that cabinet's part.
func oneWaiting(head string, st store.RecipientState) (drainLoad, bool) {
	if head == "" || len(st.Pending) > 0 || st.Head.NextSeq <= 0 || st.Head.Watermark != st.Head.NextSeq-1 {
		return drainLoad{}, false
	}
	var l drainLoad
	found := false
	for _, e := range st.Entries {
		c := catalog.Cursor{Origin: e.Origin, ContentType: e.ContentType}
		for _, sc := range st.Cursors {
			if sc.Key() == e.Key() {
				c = sc
			}
		}
		if drawer.Held(e.Drawers, c.Acked) == 0 {
			continue
		}
		if found {
			return drainLoad{}, false
		}
		found = true
		l = drainLoad{head: head, key: e.Key(), cursor: c.Version, acked: c.Acked}
		for _, r := range e.Drawers {
			l.end = max(l.end, r.End())
		}
	}
	return l, found
}

// created notes a bundle stored on cursor (as the cut read it): one that
// takes everything the recipient's last such load showed waiting, on the
// cursor version that load read, is remembered until it is acknowledged.
func (d *drains) created(recipient string, rec bundle.Record, cursor catalog.Cursor) {
	d.mu.Lock()
	defer d.mu.Unlock()
	l, ok := d.loads[recipient]
	if !ok || l.key != cursor.Key() || l.cursor != cursor.Version || l.acked != cursor.Acked ||
		rec.Start != l.acked || rec.End < l.end {
		delete(d.cuts, recipient)
		return
	}
	put(d.cuts, recipient, drainCut{bundle: rec.ID, head: l.head})
}

// acknowledged notes the dequeue of the recipient's bundle id: when it is
// the one that took everything waiting, nothing waits at that load's head.
func (d *drains) acknowledged(recipient, id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.cuts[recipient]
	if !ok || c.bundle != id {
		return
	}
	delete(d.cuts, recipient)
	put(d.idle, recipient, c.head)
}

// drained says whether nothing waits for the recipient while its head is
// at version head.
func (d *drains) drained(recipient, head string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.idle[recipient]
	if ok && v != head {
		delete(d.idle, recipient)
	}
	return ok && v == head && head != ""
}
