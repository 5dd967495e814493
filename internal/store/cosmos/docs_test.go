package cosmos

import (
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// Times in bundle documents are JSON numbers, which Cosmos DB keeps exactly
// only up to 2^53: they are microseconds, and read back exactly.
func TestBundleTimesFitAJSONNumber(t *testing.T) {
	created := time.Date(2026, 11, 22, 13, 0, 0, 123456000, time.UTC)
	dequeued := created.Add(time.Hour)
	d := fromBundle("r", bundle.Record{ID: "b", CreatedAt: created, DequeuedAt: dequeued, State: bundle.Dequeued})
	for _, v := range []int64{d.CreatedAt, d.DequeuedAt} {
		if v > 1<<53 {
			t.Fatalf("%d is over 2^53", v)
		}
	}
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back bundleDoc
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	rec := toBundle(back)
	if !rec.CreatedAt.Equal(created) || !rec.DequeuedAt.Equal(dequeued) {
		t.Fatalf("read back %v and %v, want %v and %v", rec.CreatedAt, rec.DequeuedAt, created, dequeued)
	}
}

// A dequeued bundle's drawer runs survive the round trip through its
// document, which keeps each drawer whole and its holes beside: it reads
// back from them once they left the catalog entry.
func TestDequeuedBundleKeepsItsDrawers(t *testing.T) {
	whole := []drawerMeta{
		{ID: "d1", Start: 0, Count: drawer.Capacity, FirstSeq: 1, LastSeq: 10_000, FirstAt: 7, LastAt: 8},
		{ID: "d2", Start: drawer.Capacity, Count: 3_000, FirstSeq: 10_001, LastSeq: 13_000, FirstAt: 9, LastAt: 9},
	}
	holes := [][2]int64{{6, 9}, {100, 101}}
	rec := bundle.Record{ID: "b", State: bundle.Dequeued, Start: 5, End: 12_000, Count: 11_990, Drawers: toRuns(whole, holes)}
	if len(rec.Drawers) != 4 {
		t.Fatalf("runs of two drawers with two holes in the first: %+v, want four", rec.Drawers)
	}
	raw, err := json.Marshal(fromBundle("r", rec))
	if err != nil {
		t.Fatal(err)
	}
	var d bundleDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Drawers, whole) || !slices.Equal(d.Holes, holes) {
		t.Fatalf("document drawers %+v holes %v, want %+v %v", d.Drawers, d.Holes, whole, holes)
	}
	if back := toBundle(d); !slices.Equal(back.Drawers, rec.Drawers) {
		t.Fatalf("read back runs %+v, want %+v", back.Drawers, rec.Drawers)
	}
	if pending := fromBundle("r", bundle.Record{ID: "p", State: bundle.Pending}); pending.Drawers != nil || pending.Holes != nil {
		t.Fatal("a pending bundle's document names drawers")
	}
	if back := toBundle(bundleDoc{T: typePending}); back.Drawers != nil {
		t.Fatal("a pending bundle read back names drawers")
	}
}

// A cabinet is stored as an entry holding the drawers that start in its last
// drawer's shelf and a shelf per shelf of positions before it; a save writes
// the shelves it fills (those from the shelf of the drawer that was last
// before it), and none when it opens no drawer.
func TestCabinetsAreStoredOnShelves(t *testing.T) {
	const r = "recipient"
	e := catalog.Entry{Origin: domain.OriginCharges, ContentType: "c"}
	for i := range 2*shelfDrawers + 6 {
		e.Drawers = append(e.Drawers, drawer.Meta{ID: strconv.Itoa(i), Start: int64(i) * drawer.Capacity, Count: drawer.Capacity})
	}
	e.Total = e.Drawers[len(e.Drawers)-1].End()
	doc, shelves := fromEntry(r, e)
	if len(shelves) != 2 || shelves[0].N != 0 || shelves[1].N != 1 || len(shelves[0].Drawers) != shelfDrawers ||
		len(shelves[1].Drawers) != shelfDrawers || len(doc.Drawers) != 6 || doc.Drawers[0].ID != strconv.Itoa(2*shelfDrawers) {
		t.Fatalf("stored as an entry of %d drawers and shelves %+v", len(doc.Drawers), shelves)
	}
	var shelved []drawerMeta
	for _, sh := range shelves {
		shelved = append(shelved, sh.Drawers...)
	}
	if back := toEntry(doc, shelved); !slices.Equal(back.Drawers, e.Drawers) {
		t.Fatalf("read back as %+v", back.Drawers)
	}
	last := e.Drawers[len(e.Drawers)-1]
	if got := shelvesFilledFrom(e, shelves, last.Start+1); got != nil {
		t.Fatalf("a save into the last drawer writes the shelves %+v", got)
	}
	// The save that opened drawer 2*shelfDrawers filled shelf 1.
	opened := e
	opened.Drawers = e.Drawers[:2*shelfDrawers+1]
	_, all := fromEntry(r, opened)
	if got := shelvesFilledFrom(opened, all, opened.Drawers[2*shelfDrawers].Start); len(got) != 1 || got[0].N != 1 {
		t.Fatalf("the save that opened the first drawer past shelf 1 writes the shelves %+v", got)
	}
	// A save whose drawers are all new writes every shelf.
	if got := shelvesFilledFrom(e, shelves, 0); len(got) != 2 {
		t.Fatalf("a new cabinet writes the shelves %+v", got)
	}
}

// The backlog's readers get a cabinet's drawers from its entry and its
// shelves, whatever order the query returns them in, as a load does.
func TestTheBacklogReadsACabinetWithItsShelves(t *testing.T) {
	const r = "recipient"
	e := catalog.Entry{Origin: domain.OriginCharges, ContentType: "c"}
	for i := range 2*shelfDrawers + 3 {
		e.Drawers = append(e.Drawers, drawer.Meta{ID: strconv.Itoa(i), Start: int64(i) * drawer.Capacity, Count: drawer.Capacity})
	}
	e.Total = e.Drawers[len(e.Drawers)-1].End()
	doc, shelves := fromEntry(r, e)
	raws := [][]byte{mustJSON(shelves[1]), mustJSON(doc), mustJSON(shelves[0])}
	b := backlogOf{records: store.RecipientRecords{Recipient: r}}
	for _, raw := range raws {
		if err := b.add(raw); err != nil {
			t.Fatal(err)
		}
	}
	got := b.done()
	if len(got.Entries) != 1 || got.Entries[0].Total != e.Total || !slices.Equal(got.Entries[0].Drawers, e.Drawers) {
		t.Fatalf("the backlog read %+v, want the cabinet's %d drawers", got.Entries, len(e.Drawers))
	}
}
