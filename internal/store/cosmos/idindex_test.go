package cosmos

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/store"
)

// A save's ids are written one document per bucket, over all its
// recipients, with each drawer and fingerprint once per run and the save's
// first page in each drawer; every reservation lists the documents holding
// its ids; a lookup finds every asked id with its own fingerprint and
// drawer, and nothing else.
func TestIDDocumentsGroupFingerprintsAndAnswerLookups(t *testing.T) {
	fps := []store.Fingerprint{{1}, {2}, {3}}
	var recs []store.IDRecord
	for i := range 300 {
		recs = append(recs, store.IDRecord{ID: uuid.NewString(), Fingerprint: fps[i%3], DrawerID: []string{"d1", "d2"}[i/200]})
	}
	plans := []savePlan{
		{save: store.RecipientSave{IDs: recs[:200]}, pages: []pageDoc{{PK: "d1", Start: 5}, {PK: "d1", Start: 3}}},
		{save: store.RecipientSave{IDs: recs[200:]}, pages: []pageDoc{{PK: "d2", Start: 0}}},
	}
	writes := idWrites("save", idLayout{write: []int{4}, read: []int{4}}, plans)
	if len(writes) != 4 {
		t.Fatalf("%d documents for 4 buckets", len(writes))
	}
	for i, p := range plans {
		if len(p.res.IDDocs) != 4 {
			t.Fatalf("reservation %d lists %v", i, p.res.IDDocs)
		}
	}
	asked := map[string]bool{}
	want := map[string]store.IDRecord{}
	for i, rec := range recs {
		if i%7 == 0 {
			asked[packID(rec.ID)] = true
			want[rec.ID] = rec
		}
	}
	found := map[string]store.IDRecord{}
	for _, w := range writes {
		if !slices.Equal(w.doc.Drawers, []string{"=d1", "=d2"}) || !slices.Equal(w.doc.Markers, []int64{3, 0}) || len(w.doc.DrawerRuns) != 2 {
			t.Fatalf("document %s: drawers %v, runs %v, first pages %v", w.doc.ID, w.doc.Drawers, w.doc.DrawerRuns, w.doc.Markers)
		}
		if len(w.doc.FPs) > 6 || len(w.doc.FPs) != len(w.doc.Runs) {
			t.Fatalf("document %s: fingerprints %v in runs %v", w.doc.ID, w.doc.FPs, w.doc.Runs)
		}
		if w.bucket != w.doc.PK || w.doc.Save != "save" {
			t.Fatalf("document %+v in bucket %s", w.doc, w.bucket)
		}
		raw, _ := json.Marshal(w.doc)
		var read idDoc
		if err := json.Unmarshal(raw, &read); err != nil {
			t.Fatal(err)
		}
		hits, err := read.hits(asked)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			rec, err := h.record()
			if err != nil {
				t.Fatal(err)
			}
			if bucket(4, h.ID) != w.bucket {
				t.Fatalf("id %s stored in bucket %s, looked up in %s", h.ID, w.bucket, bucket(4, h.ID))
			}
			found[h.ID] = rec
		}
	}
	if len(found) != len(want) {
		t.Fatalf("found %d of %d asked ids", len(found), len(want))
	}
	for id, rec := range want {
		if found[id] != rec {
			t.Fatalf("id %s found as %+v, stored as %+v", id, found[id], rec)
		}
	}
}
