package cosmos

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// Retention of the id documents of one save per bucket: such a document
// lists the drawers its ids are in, and must live as long as any of them
// holds the save's notifications. When retention deletes a drawer it names
// the saves whose pages were in it; each of their documents listing the
// drawer goes once none of its drawers holds the save's first page there
// any more (a point read each, of the drawers not already known gone).

// idReleases remembers, per save met by retention, its id documents still
// present and the drawers known to hold none of its pages: a save spread
// over many recipients loses its drawers one by one, over one pass or many,
// and should not pay for reading its documents each time. Only a cache:
// what it forgets is read again.
type idReleases struct {
	mu    sync.Mutex
	saves map[string]*savedIDs
}

// maxReleases bounds the saves remembered (a few KB each at most).
const maxReleases = 2_000

type savedIDs struct {
	docs []idDocDrawers
	gone map[string]bool // packed drawer ids
}

// idDocDrawers is what retention needs of one id document.
type idDocDrawers struct {
	ID      string   `json:"id"`
	PK      string   `json:"pk"`
	Save    string   `json:"s"`
	Drawers []string `json:"ds"`
	Markers []int64  `json:"dp"`
}

// releaseIDs is retention's part before deleting the pages of drawerID
// (which is out of the catalog, so counted as gone): of saves, those that
// have pages in it, every id document listing the drawer is deleted once no
// other drawer it lists holds the save's pages.
func (s *Store) releaseIDs(ctx context.Context, drawerID string, saves []string) (err error) {
	r := &s.released
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() {
		if err != nil {
			// The cache already leaves out documents this call meant to
			// delete, which may still exist: the next call reads them again.
			for _, saveID := range saves {
				delete(r.saves, saveID)
			}
		}
	}()
	if err := s.loadSavedIDs(ctx, saves); err != nil {
		return err
	}
	packed := packID(drawerID)
	done := map[string][]string{} // bucket → documents to delete
	var ended []string            // saves whose last id documents go now
	for _, saveID := range saves {
		e := r.saves[saveID]
		e.gone[packed] = true
		alive := map[string]bool{} // this call's probes: one per drawer
		var kept []idDocDrawers
		for _, doc := range e.docs {
			if !slices.Contains(doc.Drawers, packed) {
				kept = append(kept, doc)
				continue
			}
			live, err := s.anyDrawerHolds(ctx, doc, e.gone, alive)
			if err != nil {
				return err
			}
			if live {
				kept = append(kept, doc)
			} else {
				done[doc.PK] = append(done[doc.PK], doc.ID)
			}
		}
		if len(kept) == 0 {
			if len(e.docs) > 0 {
				ended = append(ended, saveID)
			}
			delete(r.saves, saveID)
		}
		e.docs = kept
	}
	// The records first: the next call finds a save by its id documents,
	// so a record whose delete failed after them would be left to nothing.
	// Documents left without their record are an aborted save's to a
	// lookup, which is what ids past their retention are.
	if err := s.deleteSaveRecords(ctx, ended); err != nil {
		return err
	}
	for pk, ids := range done {
		if err := s.deleteAll(ctx, s.ids, pk, ids); err != nil {
			return err
		}
	}
	return nil
}

// deleteSaveRecords deletes the commit records of saves whose last id
// documents go now: a committed record vouches for its save's ids, and
// with them going (every drawer that held the save's notifications is gone
// too, so no reservation of the save is left to settle) nothing reads it
// again. A record already gone is no error.
func (s *Store) deleteSaveRecords(ctx context.Context, saves []string) error {
	for _, saveID := range saves {
		if err := s.deleteItem(ctx, s.saves, azcosmos.NewPartitionKeyString(saveID), saveID); err != nil && !isStatus(err, http.StatusNotFound) {
			return err
		}
	}
	return nil
}

// loadSavedIDs reads the drawer lists of the id documents of the saves not
// remembered yet: one query per bucket (of every layout read) for all of
// them. Each carries the token its bucket's primary answers (anchorOnPrimary,
// a 1 RU read): the ids were written by any instance, and a replica behind
// one of a save's documents would leave it out, the others would be taken
// for the save's last, and the commit record would go with them, while the
// document left lists a drawer that still holds the save's notifications:
// their ids would count for no look-up and a resend would be stored twice.
func (s *Store) loadSavedIDs(ctx context.Context, saves []string) error {
	r := &s.released
	if r.saves == nil {
		r.saves = map[string]*savedIDs{}
	}
	var missing []string
	for _, saveID := range saves {
		if _, ok := r.saves[saveID]; !ok {
			missing = append(missing, saveID)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	found := map[string]*savedIDs{}
	for _, saveID := range missing {
		found[saveID] = &savedIDs{gone: map[string]bool{}}
	}
	layout, err := s.layout(ctx)
	if err != nil {
		return err
	}
	var all []string
	for _, count := range layout.read {
		all = append(all, buckets(count)...)
	}
	for _, b := range all {
		opts := &azcosmos.QueryOptions{
			QueryParameters: []azcosmos.QueryParameter{{Name: "@s", Value: missing}},
			SessionToken:    s.tokens.get(containerIDs),
		}
		if err := s.anchorOnPrimary(ctx, s.ids, b, opts); err != nil {
			return err
		}
		err := queryWith(ctx, s.ids, b, "SELECT c.id, c.pk, c.s, c.ds, c.dp FROM c WHERE ARRAY_CONTAINS(@s, c.s)", opts, func(raw []byte) error {
			var d idDocDrawers
			if err := json.Unmarshal(raw, &d); err != nil {
				return err
			}
			if e := found[d.Save]; e != nil {
				e.docs = append(e.docs, d)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for k := range r.saves {
		if len(r.saves)+len(found) <= maxReleases {
			break
		}
		delete(r.saves, k)
	}
	maps.Copy(r.saves, found)
	return nil
}

// anyDrawerHolds says whether a drawer doc lists still holds the save's
// first page in it. Drawers found gone are remembered; alive ones only for
// this call (another instance's retention may delete them next).
func (s *Store) anyDrawerHolds(ctx context.Context, doc idDocDrawers, gone, alive map[string]bool) (bool, error) {
	for i, d := range doc.Drawers {
		if gone[d] {
			continue
		}
		if alive[d] {
			return true, nil
		}
		if i >= len(doc.Markers) || doc.Markers[i] < 0 {
			return true, nil // no page to look for: keep the ids rather than lose them
		}
		drawerID, err := unpackID(d)
		if err != nil {
			return false, err
		}
		// On the primary, both ways: a replica behind a delete would keep
		// ids no later sweep comes back for (another instance may have
		// deleted the drawer, and its session token is not ours), and one
		// behind the page's create (a 404/1002) would let a duplicate in.
		var page struct{}
		found, err := s.readOnPrimary(ctx, s.drawers, drawerID, pageID(doc.Markers[i]), &page)
		switch {
		case err != nil:
			return false, err
		case found:
			alive[d] = true
			return true, nil
		default:
			gone[d] = true
		}
	}
	return false, nil
}
