package cosmos

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"golang.org/x/sync/errgroup"

	"github.com/energydatahub/messagehub/internal/store"
)

// The id index: which notification ids are stored, by which save, with
// which fingerprint. Saves write it in step 3 and check it in step 4.

// idWrite is one id document to write, with the bucket it belongs to.
type idWrite struct {
	bucket string
	doc    idDoc
}

// checkIDs looks the save's ids up again after writing them: an id some
// other save holds too means this one gives way, as a duplicate when the
// other one is committed, to be retried when it is still in flight.
func (s *Store) checkIDs(ctx context.Context, saveID string, plans []savePlan) error {
	var ids []string
	for _, p := range plans {
		for _, rec := range p.save.IDs {
			ids = append(ids, rec.ID)
		}
	}
	hits, err := s.lookup(ctx, ids, saveID, false)
	if err != nil {
		return err
	}
	existing, states, inFlight, err := s.settledHits(ctx, hits, s.saveState)
	if err != nil {
		return err
	}
	// A committed save whose reservation is still in a head this save
	// reserved on is not finalized yet (its process may have died after
	// its commit): its notifications are not visible, so its ids are not
	// yet duplicates the caller may be told of. It is in flight until its
	// own finalize, or the settler after its lease, drops the reservation.
	unfinalized := slices.ContainsFunc(plans, func(p savePlan) bool {
		return heldBy(p.head, saveID, states)
	})
	if len(existing) > 0 && !unfinalized {
		// A save that reserved after this one is in no head this save
		// wrote: the heads now, on the primary, say whether it is
		// finalized (its reservation was written before its commit).
		if unfinalized, err = s.unfinalizedOnPrimary(ctx, saveID, plans, existing, states); err != nil {
			return err
		}
	}
	if len(existing) > 0 && !unfinalized {
		return &store.IDsExistError{Records: existing}
	}
	if inFlight || unfinalized {
		return fmt.Errorf("%w: another save of the same ids is in flight", store.ErrConflict)
	}
	return nil
}

// heldBy says whether head holds the reservation of a committed save other
// than saveID.
func heldBy(head headDoc, saveID string, states map[string]string) bool {
	return slices.ContainsFunc(head.Reservations, func(r reservation) bool {
		return r.Save != saveID && states[r.Save] == stateCommitted
	})
}

// unfinalizedOnPrimary reads on the primary the head of each recipient of
// plans that has ids in existing, and says whether one holds the
// reservation of a committed save: a save that reserved after this one and
// committed first (this one may be a resend that reserved before its
// original did), not finalized yet.
func (s *Store) unfinalizedOnPrimary(ctx context.Context, saveID string, plans []savePlan, existing map[string]store.IDRecord, states map[string]string) (bool, error) {
	var held atomic.Bool
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, p := range plans {
		if !slices.ContainsFunc(p.save.IDs, func(rec store.IDRecord) bool { _, ok := existing[rec.ID]; return ok }) {
			continue
		}
		g.Go(func() error {
			var head headDoc
			found, err := s.readOnPrimary(ctx, s.recipients, p.save.Recipient, headID, &head)
			if err == nil && found && heldBy(head, saveID, states) {
				held.Store(true)
			}
			return err
		})
	}
	err := g.Wait()
	return held.Load(), err
}

// lookupIDs returns the ids stored by committed saves, for an operator's
// trace (and the remedy that traces its target first): what it answers is
// told to the operator, or acted on, as the truth. A replica behind
// another instance's writes would answer that a stored id is not (its id
// document not there yet, or its save's record still pending), so every
// bucket is read with the token its primary answers, and each save hit has
// its commit record read on the primary: an id of a save that may still
// abort, or that aborted, is left out; one of a committed save is not.
// That costs one read of 1 RU per bucket looked in and one point read per
// distinct save hit, on these operator calls only: a Save's own look-up
// (checkIDs) takes a pending answer for "retry", which a later look-up
// corrects.
func (s *Store) lookupIDs(ctx context.Context, ids []string) (map[string]store.IDRecord, error) {
	hits, err := s.lookup(ctx, ids, "", true)
	if err != nil {
		return nil, err
	}
	found, _, _, err := s.settledHits(ctx, hits, func(ctx context.Context, saveID, _ string) (string, error) {
		d, err := s.readSaveOnPrimary(ctx, saveID)
		return d.State, err
	})
	return found, err
}

// settledHits returns the hits whose save is committed, the state of each
// save hit (read by stateOf), and whether any belongs to a save still in
// flight. Each save's record is read once, however many of its ids were
// hit.
func (s *Store) settledHits(ctx context.Context, hits []idHit, stateOf func(ctx context.Context, saveID, token string) (string, error)) (committed map[string]store.IDRecord, states map[string]string, inFlight bool, err error) {
	committed = make(map[string]store.IDRecord)
	states = make(map[string]string)
	for _, h := range hits {
		state, ok := states[h.Save]
		if !ok {
			if state, err = stateOf(ctx, h.Save, h.Token); err != nil {
				return nil, nil, false, err
			}
			states[h.Save] = state
		}
		switch state {
		case stateCommitted:
			if committed[h.ID], err = h.record(); err != nil {
				return nil, nil, false, err
			}
		case statePending:
			inFlight = true
		}
	}
	s.dropAbortedIDDocs(ctx, hits, states)
	return committed, states, inFlight, nil
}

// dropAbortedIDDocs deletes the id documents of aborted saves that hits
// met. Their ids count for nothing, and nothing else removes one whose
// create, given up on by its save, arrived after the rollback deleted the
// save's documents, or whose delete in the rollback failed: the
// reservation and pages through which a rollback or retention finds a
// save's id documents are gone. The client's resend of the aborted save is
// the lookup that meets them. A delete that fails is left to the next
// lookup (or an id migration's look at the old buckets): the caller's
// answer does not depend on it.
func (s *Store) dropAbortedIDDocs(ctx context.Context, hits []idHit, states map[string]string) {
	done := map[[2]string]bool{}
	for _, h := range hits {
		k := [2]string{h.Bucket, h.Save}
		if states[h.Save] != stateAborted || done[k] {
			continue
		}
		done[k] = true
		err := s.deleteItem(ctx, s.ids, azcosmos.NewPartitionKeyString(h.Bucket), h.Save)
		if err != nil && !isStatus(err, http.StatusNotFound) {
			s.cfg.Logger.Warn("cosmos: cannot delete an id document of an aborted save", "bucket", h.Bucket, "save", h.Save, "error", err)
		}
	}
}

// lookup queries each bucket the ids fall in, in parallel, leaving out the
// documents of the save named by except; anchored reads every bucket with
// the token its primary answers (as below for an unwritten layout). Ids are
// sent packed and in chunks: a query's text and parameters must stay under
// 512 KB, and the 20,000 ids of the largest group commit would be 780 KB as
// canonical strings.
//
// A save's look-up sees the ids other saves wrote in a bucket through the
// token of its own id document there, written just before. A layout that
// saves no longer write (the old one, past a migration's both-layouts
// phase) holds no document of this save: its buckets are read with the
// token their primaries answer (primaryToken), else a replica behind the
// ids another instance kept there would miss them and the save would store
// them again.
func (s *Store) lookup(ctx context.Context, ids []string, except string, anchored bool) ([]idHit, error) {
	layout, err := s.layout(ctx)
	if err != nil {
		return nil, err
	}
	type part struct {
		bucket string
		ids    []string
		anchor bool // read with the bucket's primary token
	}
	byBucket := map[string][]string{}
	anchor := map[string]bool{}
	var order []string
	add := func(bucket, id string) {
		if _, ok := byBucket[bucket]; !ok {
			order = append(order, bucket)
		}
		byBucket[bucket] = append(byBucket[bucket], id)
	}
	for _, count := range layout.read {
		unwritten := !slices.Contains(layout.write, count)
		for _, id := range ids {
			b := bucket(count, id)
			add(b, packID(id))
			anchor[b] = anchored || unwritten
		}
	}
	var parts []part
	for _, b := range order {
		for _, chunk := range chunkIDs(byBucket[b], maxLookupBytes) {
			parts = append(parts, part{bucket: b, ids: chunk, anchor: anchor[b]})
		}
	}
	var mu sync.Mutex
	var hits []idHit
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, p := range parts {
		g.Go(func() error {
			params := []azcosmos.QueryParameter{{Name: "@ids", Value: p.ids}, {Name: "@except", Value: except}}
			asked := make(map[string]bool, len(p.ids))
			for _, id := range p.ids {
				asked[id] = true
			}
			opts := &azcosmos.QueryOptions{QueryParameters: params, SessionToken: s.tokens.get(containerIDs)}
			if p.anchor {
				if err := s.anchorOnPrimary(ctx, s.ids, p.bucket, opts); err != nil {
					return err
				}
			}
			return queryWith(ctx, s.ids, p.bucket, lookupSQL, opts, func(raw []byte) error {
				var d idDoc
				if err := json.Unmarshal(raw, &d); err != nil {
					return err
				}
				found, err := d.hits(asked)
				mu.Lock()
				hits = append(hits, found...)
				mu.Unlock()
				return err
			})
		})
	}
	return hits, g.Wait()
}

// lookupSQL finds the other saves' documents that hold any of @ids; a
// document comes back once, whole, however many of them it holds (the rare
// path: duplicates). New ids, the common case, load no document at all.
const lookupSQL = "SELECT c.id, c.pk, c.s, c.st, c.i, c.f, c.fn, c.ds, c.dn FROM c " +
	"WHERE c.s != @except AND EXISTS(SELECT VALUE i FROM i IN c.i WHERE ARRAY_CONTAINS(@ids, i))"

// maxLookupBytes bounds the ids of one lookup query, well below the 512 KB
// Cosmos DB allows for a query's text and parameters.
const maxLookupBytes = 256 << 10

// chunkIDs splits ids into runs of at most maxBytes as a JSON array.
func chunkIDs(ids []string, maxBytes int) [][]string {
	var out [][]string
	start, size := 0, 0
	for i, id := range ids {
		n := len(id) + 3 // quotes and comma
		if i > start && size+n > maxBytes {
			out = append(out, ids[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(ids) {
		out = append(out, ids[start:])
	}
	return out
}

func (h idHit) record() (store.IDRecord, error) {
	fp, err := parseFingerprint(h.Fingerprint)
	return store.IDRecord{ID: h.ID, Fingerprint: fp, DrawerID: h.Drawer}, err
}

// saveState reads a save's commit record with the token it was created
// with. Committed and aborted are final whichever replica says so; a 404
// (with substatus 1002: no replica has caught up with the token) is asked
// of the primary, where a missing record was aborted and expired
// (committed records outlive the data they cover).
func (s *Store) saveState(ctx context.Context, saveID, token string) (string, error) {
	item, err := s.readItem(ctx, s.saves, azcosmos.NewPartitionKeyString(saveID), saveID, token)
	if isStatus(err, http.StatusNotFound) {
		d, err := s.readSaveOnPrimary(ctx, saveID)
		return d.State, err
	}
	if err != nil {
		return "", err
	}
	var d saveDoc
	return d.State, json.Unmarshal(item.Value, &d)
}

// idWrites groups the ids of a save, over all its recipients, into one
// document per bucket of each layout it writes (idlayout.go), each listing the drawers its ids are in with the
// save's first page in each: retention deletes the document once all of
// them are gone (see releaseIDs). One document per bucket and drawer cost
// a 1 KB write each when a save is spread over many recipients. Every
// reservation lists the documents holding its recipient's ids, for a
// rollback.
func idWrites(saveID string, layout idLayout, plans []savePlan) []idWrite {
	type entry struct {
		rec    store.IDRecord
		drawer string // packed
	}
	markers := map[string]int64{}
	for _, p := range plans {
		for _, pg := range p.pages {
			if m, ok := markers[pg.PK]; !ok || pg.Start < m {
				markers[pg.PK] = pg.Start
			}
		}
	}
	byBucket := map[string][]entry{}
	var order []string
	for i := range plans {
		p := &plans[i]
		inPlan := map[string]bool{}
		for _, count := range layout.write {
			for _, rec := range p.save.IDs {
				b := bucket(count, rec.ID)
				if _, ok := byBucket[b]; !ok {
					order = append(order, b)
				}
				byBucket[b] = append(byBucket[b], entry{rec: rec, drawer: packID(rec.DrawerID)})
				if !inPlan[b] {
					inPlan[b] = true
					p.res.IDDocs = append(p.res.IDDocs, docRef{PK: b, ID: saveID})
				}
			}
		}
	}
	out := make([]idWrite, 0, len(order))
	for _, b := range order {
		doc := idDoc{ID: saveID, PK: b, Save: saveID}
		in := byBucket[b]
		// Sorted by drawer, then fingerprint (ids of one content share it):
		// each drawer and fingerprint is stored once per run.
		slices.SortStableFunc(in, func(x, y entry) int {
			if c := strings.Compare(x.drawer, y.drawer); c != 0 {
				return c
			}
			return bytes.Compare(x.rec.Fingerprint[:], y.rec.Fingerprint[:])
		})
		for i, e := range in {
			doc.IDs = append(doc.IDs, packID(e.rec.ID))
			newDrawer := i == 0 || e.drawer != in[i-1].drawer
			if newDrawer {
				doc.Drawers = append(doc.Drawers, e.drawer)
				doc.DrawerRuns = append(doc.DrawerRuns, 0)
				m, ok := markers[e.rec.DrawerID]
				if !ok {
					m = -1 // no page of this save there (never expected): retention keeps the document
				}
				doc.Markers = append(doc.Markers, m)
			}
			doc.DrawerRuns[len(doc.DrawerRuns)-1]++
			if newDrawer || e.rec.Fingerprint != in[i-1].rec.Fingerprint {
				doc.FPs = append(doc.FPs, fingerprintString(e.rec.Fingerprint))
				doc.Runs = append(doc.Runs, 0)
			}
			doc.Runs[len(doc.Runs)-1]++
		}
		out = append(out, idWrite{bucket: b, doc: doc})
	}
	return out
}

// idDoc indexes the ids of one save that fall in one bucket: IDs packed
// (22 characters each; the only indexed terms per id), their fingerprints
// as runs (FPs[k] covers the next Runs[k] ids) and their drawers as runs
// (Drawers[k], packed, covers the next DrawerRuns[k] ids; Markers[k] is the
// start of the save's first page in it).
type idDoc struct {
	ID         string   `json:"id"`
	PK         string   `json:"pk"`
	Save       string   `json:"s"`
	Token      string   `json:"st,omitempty"` // session token of the save's commit record
	IDs        []string `json:"i,omitempty"`
	FPs        []string `json:"f,omitempty"`
	Runs       []int    `json:"fn,omitempty"`
	Drawers    []string `json:"ds,omitempty"`
	DrawerRuns []int    `json:"dn,omitempty"`
	Markers    []int64  `json:"dp,omitempty"`
}

// hits returns the document's entries whose packed id is asked for.
func (d idDoc) hits(asked map[string]bool) ([]idHit, error) {
	fps := runs{vals: d.FPs, n: d.Runs}
	drawers := runs{vals: d.Drawers, n: d.DrawerRuns}
	var out []idHit
	for _, packed := range d.IDs {
		fp, ok := fps.next()
		drawer, found := drawers.next()
		if !ok || !found {
			return nil, fmt.Errorf("id document %s in %s of save %s: runs do not cover its ids", d.ID, d.PK, d.Save)
		}
		if !asked[packed] {
			continue
		}
		id, err := unpackID(packed)
		if err != nil {
			return nil, err
		}
		if drawer, err = unpackID(drawer); err != nil {
			return nil, err
		}
		out = append(out, idHit{ID: id, Fingerprint: fp, Drawer: drawer, Save: d.Save, Token: d.Token, Bucket: d.PK})
	}
	return out, nil
}

// runs walks values stored as runs: vals[k] repeated n[k] times.
type runs struct {
	vals    []string
	n       []int
	k, left int // k: the run after the current one
}

func (r *runs) next() (string, bool) {
	for r.left == 0 {
		if r.k >= len(r.n) || r.k >= len(r.vals) {
			return "", false
		}
		r.left = r.n[r.k]
		r.k++
	}
	r.left--
	return r.vals[r.k-1], true
}

// idHit is one id a lookup found, with the save that holds it.
type idHit struct {
	ID, Fingerprint, Drawer, Save string
	Token                         string // session token of the save's commit record
	Bucket                        string // of the id document holding it
}

func fingerprintString(fp store.Fingerprint) string {
	return base64.RawURLEncoding.EncodeToString(fp[:])
}

func parseFingerprint(s string) (store.Fingerprint, error) {
	var fp store.Fingerprint
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != len(fp) {
		return fp, fmt.Errorf("corrupt fingerprint %q", s)
	}
	copy(fp[:], b)
	return fp, nil
}
