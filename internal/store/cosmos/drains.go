package cosmos

import (
	"slices"
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
//
// The bundles it remembers also answer the Dequeue that follows them on
// this instance (store.OwnBundle) without a read: the bundle and its
// cursor at the versions their creation left, and the runs of the entry
// that hold the bundle's positions as its cut read them (positions once
// written stay in the drawers that hold them, and a pending bundle's are
// unacknowledged, so no sweep takes those drawers out of the entry). The
// Dequeue's batch is conditional on the bundle's and the cursor's
// versions, so a bundle dequeued or released elsewhere meanwhile fails it,
// and the retry loads anchored.
type drains struct {
	mu sync.Mutex
	// loads: per recipient, the last Peek's load, when its catalog is
	// small enough to keep (maxDrainRuns).
	loads map[string]drainLoad
	// cuts: per recipient and bundle id, the pending bundles this instance
	// created from such a load, as it created them.
	cuts map[string]drainCut
	// idle: per recipient, the head version at which nothing waits.
	idle map[string]string
}

// drainLoad is a Peek's load of a recipient: its head's etag and its
// state, without its pending bundles (pending says whether it had any).
type drainLoad struct {
	head    string
	st      store.RecipientState
	pending bool
}

// drainCut is a pending bundle this instance created (rec and cursor at
// the versions its creation left), its cabinet's entry as the load it was
// cut from read it (the runs that hold its positions), and, when it took
// everything that load showed waiting, that load's head etag.
type drainCut struct {
	rec     bundle.Record
	cursor  catalog.Cursor
	entry   catalog.Entry
	drained string
}

// maxDrains bounds each of the maps (a load kept is its catalog, at most
// maxDrainRuns runs of about a hundred bytes), and one forgotten only
// costs a Peek or a Dequeue its full load.
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

// maxDrainRuns bounds the drawer runs of a load kept: the catalog of a
// recipient with many cabinets or drawers is not kept (its Peeks and
// Dequeues load in full).
const maxDrainRuns = 64

// loaded notes the state of a Peek's full load of the recipient, read with
// its head on the primary (head is its etag).
func (d *drains) loaded(recipient, head string, st store.RecipientState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.loads == nil {
		d.loads, d.cuts, d.idle = map[string]drainLoad{}, map[string]drainCut{}, map[string]string{}
	}
	runs := 0
	for _, e := range st.Entries {
		runs += len(e.Drawers)
	}
	if head == "" || runs > maxDrainRuns {
		delete(d.loads, recipient)
		return
	}
	pending := len(st.Pending) > 0
	st.Pending = nil
	put(d.loads, recipient, drainLoad{head: head, st: st, pending: pending})
}

// oneWaiting says whether l has nothing pending, no save under way and
// exactly one cabinet with positions after its cursor, and returns that
// cabinet, its cursor and the end of the last position its runs hold.
func oneWaiting(l drainLoad) (catalog.Key, catalog.Cursor, int64, bool) {
	st := l.st
	if l.pending || st.Head.NextSeq <= 0 || st.Head.Watermark != st.Head.NextSeq-1 {
		return catalog.Key{}, catalog.Cursor{}, 0, false
	}
	var key catalog.Key
	var cursor catalog.Cursor
	var end int64
	found := false
	for _, e := range st.Entries {
		c := cursorIn(st, e.Key())
		if drawer.Held(e.Drawers, c.Acked) == 0 {
			continue
		}
		if found {
			return catalog.Key{}, catalog.Cursor{}, 0, false
		}
		found, key, cursor = true, e.Key(), c
		for _, r := range e.Drawers {
			end = max(end, r.End())
		}
	}
	return key, cursor, end, found
}

// cursorIn is the cabinet's cursor in st: acknowledged up to 0 with no
// version when st has none.
func cursorIn(st store.RecipientState, k catalog.Key) catalog.Cursor {
	for _, c := range st.Cursors {
		if c.Key() == k {
			return c
		}
	}
	return catalog.Cursor{Origin: k.Origin, ContentType: k.ContentType}
}

// created notes rec, a pending bundle stored on cursor (as the cut read
// it), whose creation left the bundle at version rec.Version and the
// cursor at version now: when the recipient's last Peek's load read that
// cursor version, the bundle is kept with the runs of that load's entry
// that hold its positions, and with the load's head when it took
// everything the load showed waiting. lastHead is the head version the
// last load of the recipient on this instance read ("" when unknown).
//
// A cursor that did not exist (version "") pairs the cut with no load in
// particular: every load of a cabinet without a cursor shows that
// version, also one of the cabinet before retention took it out of the
// catalog with its cursor and a save started it afresh at position 0 in
// other drawers, whose runs would name the old drawers
// (TestAnOwnBundleOfARestartedCabinetIsNotDequeuedWithTheOldCabinetsDrawers:
// the Peek's load kept since, and a bundle cut from another load, an
// operator's AcknowledgeOnBehalf). Such a bundle is kept only when the
// Peek's load is the last load of the recipient here, at the head the
// cut's load read too: no save came between them, so the cabinet is the
// one that load read.
func (d *drains) created(recipient string, rec bundle.Record, cursor catalog.Cursor, now, lastHead string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	l, ok := d.loads[recipient]
	if !ok || rec.Version == "" || now == "" {
		return
	}
	if cursor.Version == "" && (lastHead == "" || l.head != lastHead) {
		return
	}
	if c := cursorIn(l.st, cursor.Key()); c.Version != cursor.Version || c.Acked != cursor.Acked || rec.Start != c.Acked {
		return
	}
	i := slices.IndexFunc(l.st.Entries, func(e catalog.Entry) bool { return e.Key() == cursor.Key() })
	if i < 0 {
		return
	}
	e := l.st.Entries[i]
	var runs []drawer.Meta
	for _, r := range e.Drawers {
		if r.Count > 0 && r.End() > rec.Start && r.Start < rec.End {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 || runs[len(runs)-1].End() < rec.End {
		return
	}
	cut := drainCut{rec: rec, cursor: cursor, entry: catalog.Entry{Origin: e.Origin, ContentType: e.ContentType, Drawers: runs, Total: e.Total, Version: e.Version}}
	cut.cursor.Version = now
	if k, c, end, one := oneWaiting(l); one && k == cursor.Key() && c.Acked == rec.Start && rec.End >= end {
		cut.drained = l.head
	}
	put(d.cuts, cutKey(recipient, rec.ID), cut)
}

func cutKey(recipient, id string) string { return recipient + "\x00" + id }

// own returns the state OwnBundle(id) may be answered with: the bundle as
// this instance created it, with its cursor and entry.
func (d *drains) own(recipient, id string) (store.RecipientState, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.cuts[cutKey(recipient, id)]
	if !ok {
		return store.RecipientState{}, false
	}
	return store.RecipientState{Entries: []catalog.Entry{c.entry}, Cursors: []catalog.Cursor{c.cursor}, Pending: []bundle.Record{c.rec}}, true
}

// ended notes an acknowledge or a release of the recipient's bundle id,
// whatever its outcome: the bundle is forgotten, and when it was dequeued
// and took everything waiting, nothing waits at the head of the load it
// was cut from.
func (d *drains) ended(recipient, id string, dequeued bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, found := d.cuts[cutKey(recipient, id)]
	if !found {
		return
	}
	delete(d.cuts, cutKey(recipient, id))
	if dequeued && c.drained != "" {
		put(d.idle, recipient, c.drained)
	}
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
