package cosmos

import (
	"slices"
	"sync"

	"github.com/energydatahub/messagehub/internal/catalog"
)

// knownCatalogs keeps, per recipient, the catalog entries that go with one
// version of its head: those a load read with that head, carried forward by
// this instance's own reserve batches and finalizes. A save's first plan
// may lag other instances' writes (store.MayLag), so when the head kept in
// knownHeads is the version kept here, the plan is made on these entries
// without a query. Every write the plan leads to is conditional on what it
// was made on: the head on its etag, each entry on its etag (or created
// where none is known), so a catalog changed since (another instance's
// save changes the head, a sweep the entries it touches) fails the reserve
// batch exactly as a lagging query's would, and the next plan loads fresh.
// This instance's own sweeps and rollbacks forget the recipient's catalog,
// so that they cost its next save no failed batch.
type knownCatalogs struct {
	mu sync.Mutex
	m  map[string]knownCatalog
}

// knownCatalog is a recipient's entries as of the head version head.
type knownCatalog struct {
	head    string
	entries []catalog.Entry
}

// keep remembers entries as the recipient's catalog at head version head
// ("": no head, and then no entries, which the save that creates the head
// carries forward). A catalog of many runs is forgotten instead (its saves
// query it), so that the memory stays a few kilobytes per recipient
// (maxDrains).
func (k *knownCatalogs) keep(recipient, head string, entries []catalog.Entry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	runs := 0
	for _, e := range entries {
		runs += len(e.Drawers)
	}
	if head == "" && len(entries) > 0 || runs > maxDrainRuns {
		delete(k.m, recipient)
		return
	}
	if k.m == nil {
		k.m = map[string]knownCatalog{}
	}
	put(k.m, recipient, knownCatalog{head: head, entries: cloneEntries(entries)})
}

// advance moves the recipient's catalog from head version from to to,
// with written replacing the entries of their cabinets (or added), when
// the catalog kept is the one at from; otherwise it forgets it.
func (k *knownCatalogs) advance(recipient, from, to string, written []catalog.Entry) {
	k.mu.Lock()
	c, ok := k.m[recipient]
	k.mu.Unlock()
	if !ok || c.head != from {
		k.forget(recipient)
		return
	}
	entries := cloneEntries(c.entries)
	for _, w := range written {
		if i := slices.IndexFunc(entries, func(e catalog.Entry) bool { return e.Key() == w.Key() }); i >= 0 {
			entries[i] = w
		} else {
			entries = append(entries, w)
		}
	}
	k.keep(recipient, to, entries)
}

// at returns a copy of the recipient's catalog at head version head.
func (k *knownCatalogs) at(recipient, head string) ([]catalog.Entry, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, ok := k.m[recipient]
	if !ok || c.head != head {
		return nil, false
	}
	return cloneEntries(c.entries), true
}

// forget drops the recipient's catalog.
func (k *knownCatalogs) forget(recipient string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, recipient)
}

// cloneEntries copies entries down to their drawers: a plan edits the
// entries it is given.
func cloneEntries(entries []catalog.Entry) []catalog.Entry {
	out := slices.Clone(entries)
	for i := range out {
		out[i].Drawers = slices.Clone(out[i].Drawers)
	}
	return out
}
