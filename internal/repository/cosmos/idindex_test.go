package cosmos

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/repository"
)

// A save's ids are written one document per bucket and drawer, with each
// fingerprint once per run, and a lookup finds every asked id with its own
// fingerprint and drawer, and nothing else.
func TestIDDocumentsGroupFingerprintsAndAnswerLookups(t *testing.T) {
	s := &Store{cfg: Config{IDBuckets: 4}}
	fps := []repository.Fingerprint{{1}, {2}, {3}}
	var recs []repository.IDRecord
	for i := range 300 {
		recs = append(recs, repository.IDRecord{ID: uuid.NewString(), Fingerprint: fps[i%3], DrawerID: []string{"d1", "d2"}[i/200]})
	}
	writes := s.idWrites("save", recs)
	if len(writes) != 8 {
		t.Fatalf("%d documents for 4 buckets and 2 drawers", len(writes))
	}
	asked := map[string]bool{}
	want := map[string]repository.IDRecord{}
	for i, rec := range recs {
		if i%7 == 0 {
			asked[packID(rec.ID)] = true
			want[rec.ID] = rec
		}
	}
	found := map[string]repository.IDRecord{}
	for _, w := range writes {
		if len(w.doc.FPs) > 3 || len(w.doc.FPs) != len(w.doc.Runs) {
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
			if s.bucketOf(h.ID) != w.bucket {
				t.Fatalf("id %s stored in bucket %s, looked up in %s", h.ID, w.bucket, s.bucketOf(h.ID))
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
