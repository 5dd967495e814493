package cosmos

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
)

// Documents use short field names: every byte stored is paid for on write
// and on every read.

// Document types in the recipients container (field t).
const (
	typeHead     = "head"
	typeEntry    = "entry"
	typeShelf    = "shelf"
	typeCursor   = "cursor"
	typePending  = "pending"
	typeDequeued = "dequeued"
	typeReleased = "released"
	typeSlot     = "slot"
	typeRegistry = "recipient"
	typeResPart  = "respart"
)

// registryPartition holds one small document per recipient, so retention can
// list recipients without a cross-partition query.
const registryPartition = "_recipients"

const headID = "head"

// headDoc is a recipient's sequence counter, watermark and the reservations
// of saves still being written.
type headDoc struct {
	ID           string        `json:"id"`
	PK           string        `json:"pk"`
	T            string        `json:"t"`
	Next         int64         `json:"next"`
	Watermark    int64         `json:"wm"`
	Reservations []reservation `json:"res,omitempty"`
	// Wanted is the highest watermark a finished save asked for; the
	// watermark reaches it once no reservation below it is left.
	Wanted int64 `json:"want,omitempty"`
	// DrawersToken is the session token of the drawer pages below the
	// watermark (merged over saves): readers of the pages wait for it.
	DrawersToken string `json:"dst,omitempty"`
	// IdleAt is the Next at which a full load found nothing pending and
	// nothing waiting (MarkIdle); see idle.
	IdleAt int64  `json:"idle,omitempty"`
	ETag   string `json:"_etag,omitempty"`
}

// idle says the head carries MarkIdle's mark at its present state: no save
// has reserved sequence numbers since the mark (every reservation raises
// Next, and a save's positions enter the catalog in the batch that writes
// its reservation), none is under way, and every sequence number handed
// out is below the watermark. What could make a notification wait after
// the mark (a save) or be pending (a bundle cut from what a save stored)
// therefore moves Next past IdleAt first, and a head that says idle hides
// nothing. Writers that rewrite the whole head carry IdleAt along
// unchanged, which is harmless: it no longer equals Next.
func (h *headDoc) idle() bool {
	return h.IdleAt > 0 && h.IdleAt == h.Next && len(h.Reservations) == 0 && h.Watermark == h.Next-1
}

// reservation is a range of sequence numbers a save has taken but not yet
// made visible, with what it writes so that it can be rolled back.
type reservation struct {
	Save    string `json:"s"`
	From    int64  `json:"from"`
	To      int64  `json:"to"`
	Expires int64  `json:"exp"` // unix milliseconds
	// resDetail is the first chunk of what the save takes and writes; the
	// rest, for saves of more cabinets than one batch can reserve, is in
	// Parts part documents, each written with the entries it describes.
	resDetail
	Parts int `json:"np,omitempty"`
	// Token is the session token of the save's commit record, so that a
	// reader of the record never takes a lagging replica's 404 for an abort.
	Token string `json:"st,omitempty"`
}

// resDetail is what a save takes and writes in some of its cabinets.
type resDetail struct {
	Pages  []pageRef `json:"pg,omitempty"`
	IDDocs []docRef  `json:"ix,omitempty"`
	// Ranges are the cabinet positions it took: an abort records them as
	// holes in the catalog entries before, or in the write that, it drops
	// the reservation.
	Ranges []posRange `json:"rg,omitempty"`
}

// resPartDoc is part k (1, 2, ...) of a reservation's detail, created in
// the batch that takes the positions it lists, so it exists exactly when
// they are taken.
type resPartDoc struct {
	ID   string `json:"id"`
	PK   string `json:"pk"`
	T    string `json:"t"`
	Save string `json:"s"`
	resDetail
}

func resPartID(saveID string, k int) string { return "r:" + saveID + ":" + strconv.Itoa(k) }

// posRange is a run of positions [Start, End) of one cabinet.
type posRange struct {
	Origin int32  `json:"o"`
	CT     string `json:"ct"`
	Start  int64  `json:"s"`
	End    int64  `json:"e"`
}

func (r posRange) key() catalog.Key {
	return catalog.Key{Origin: domain.Origin(r.Origin), ContentType: r.CT}
}

type pageRef struct {
	Drawer string `json:"d"`
	ID     string `json:"i"`
}

type docRef struct {
	PK string `json:"p"`
	ID string `json:"i"`
}

// watermark is the highest sequence number below which no reservation is
// outstanding.
func (h *headDoc) watermark() int64 {
	wm := h.Next - 1
	for _, r := range h.Reservations {
		wm = min(wm, r.From-1)
	}
	return wm
}

// entryDoc is a cabinet's catalog entry as stored: its total, its holes, its
// last drawer (the one saves still fill) and the drawers before it that are
// not on a shelf yet. Drawers go onto shelves (shelfDoc) a shelf at a time,
// so the entry lists fewer than shelfDrawers drawers in the common case
// however many the cabinet has: a save rewrites a few KB at most, not a
// list of every drawer (up to 0.83 MB at catalog.MaxDrawers).
type entryDoc struct {
	ID      string       `json:"id"`
	PK      string       `json:"pk"`
	T       string       `json:"t"`
	Origin  int32        `json:"o"`
	CT      string       `json:"ct"`
	Drawers []drawerMeta `json:"dr"`
	Total   int64        `json:"tot"`
	Holes   [][2]int64   `json:"h,omitempty"` // [start, end) of positions aborted saves left empty
	ETag    string       `json:"_etag,omitempty"`
}

// shelfDoc lists the drawers of a cabinet that start in positions
// [N*shelfPositions(), (N+1)*shelfPositions()), once its last drawer starts
// past them: none of them is written to again, so the shelf is written once,
// in the reserve batch of the save that opens a drawer past it, and changes
// again only in the batches of the sweeps that take its drawers out of the
// catalog (the last one deletes it). It exists, with exactly those drawers,
// while the entry, as of its etag, has them.
type shelfDoc struct {
	ID      string       `json:"id"`
	PK      string       `json:"pk"`
	T       string       `json:"t"`
	Origin  int32        `json:"o"`
	CT      string       `json:"ct"`
	N       int64        `json:"n"`
	Drawers []drawerMeta `json:"dr"`
}

// shelfDrawers is how many full drawers' positions a shelf covers: about 5
// KB of drawers, read as one document (1.2 RU) by every load of the cabinet.
// It fixes which documents hold which drawers: a part of the format.
var shelfDrawers = 32

func shelfPositions() int64 { return int64(shelfDrawers) * drawer.Capacity }

func shelfID(k catalog.Key, n int64) string {
	return "s:" + strconv.Itoa(int(k.Origin)) + ":" + strconv.FormatInt(n, 10) + ":" + k.ContentType
}

type drawerMeta struct {
	ID       string `json:"id"`
	Start    int64  `json:"st"`
	Count    int    `json:"n"`
	FirstSeq int64  `json:"fs"`
	LastSeq  int64  `json:"ls"`
	FirstAt  int64  `json:"fa,omitempty"` // unix milliseconds
	LastAt   int64  `json:"la,omitempty"`
}

type cursorDoc struct {
	ID      string `json:"id"`
	PK      string `json:"pk"`
	T       string `json:"t"`
	Origin  int32  `json:"o"`
	CT      string `json:"ct"`
	Acked   int64  `json:"ack"`
	HeadSeq int64  `json:"hs"`
	MovedAt int64  `json:"mv,omitempty"` // unix ms; not indexed (provision.go)
	ETag    string `json:"_etag,omitempty"`
}

type bundleDoc struct {
	ID         string       `json:"id"`
	PK         string       `json:"pk"`
	T          string       `json:"t"`
	Bundle     string       `json:"bid"`
	Origin     int32        `json:"o"`
	CT         string       `json:"ct"`
	Group      int32        `json:"g"`
	Start      int64        `json:"st"`
	End        int64        `json:"en"`
	Count      int          `json:"n"`
	Weight     int64        `json:"w"`
	DocTypes   []string     `json:"dt,omitempty"` // absent when too long to keep: read back from the items
	NextSeq    int64        `json:"ns"`
	Drawers    []drawerMeta `json:"dr,omitempty"` // set at dequeue: the drawers it reads back from
	Holes      [][2]int64   `json:"h,omitempty"`  // holes within them
	CreatedAt  int64        `json:"ca"`           // unix microseconds: exact within the 2^53 of a JSON number
	DequeuedAt int64        `json:"da,omitempty"`
	ReleasedAt int64        `json:"ra,omitempty"` // unix microseconds
	TTL        *int32       `json:"ttl,omitempty"`
	ETag       string       `json:"_etag,omitempty"`
}

// slotDoc marks the one pending bundle of a peek group: creating it is what
// makes concurrent peeks agree.
type slotDoc struct {
	ID     string `json:"id"`
	PK     string `json:"pk"`
	T      string `json:"t"`
	Bundle string `json:"bid"`
}

type saveDoc struct {
	ID    string `json:"id"`
	PK    string `json:"pk"`
	State string `json:"state"`
	TTL   int32  `json:"ttl"`
	// DrawersToken, in a committed record, is the session token of the
	// save's page batches: whoever finalizes the save in its stead (its
	// process died after the commit) keeps it in the head, as the save's
	// own finalize does, so that every instance reads the pages with it.
	DrawersToken string `json:"dst,omitempty"`
	ETag         string `json:"_etag,omitempty"`
}

// States of a save's commit record.
const (
	statePending   = "pending"
	stateCommitted = "committed"
	stateAborted   = "aborted"
)

func entryID(k catalog.Key) string  { return "e:" + strconv.Itoa(int(k.Origin)) + ":" + k.ContentType }
func cursorID(k catalog.Key) string { return "c:" + strconv.Itoa(int(k.Origin)) + ":" + k.ContentType }
func bundleDocID(id string) string  { return "b:" + id }
func slotID(g domain.PeekGroup) string {
	return "p:" + strconv.Itoa(int(g))
}

// toEntry is the catalog entry of d and the drawers on its cabinet's
// shelves (in any order).
func toEntry(d entryDoc, shelved []drawerMeta) catalog.Entry {
	drawers := d.Drawers
	if len(shelved) > 0 {
		drawers = slices.Concat(shelved, d.Drawers)
		slices.SortStableFunc(drawers, func(a, b drawerMeta) int { return cmp.Compare(a.Start, b.Start) })
		drawers = slices.CompactFunc(drawers, func(a, b drawerMeta) bool { return a.ID == b.ID })
	}
	return catalog.Entry{Origin: domain.Origin(d.Origin), ContentType: d.CT, Drawers: toRuns(drawers, d.Holes), Total: d.Total, Version: d.ETag}
}

// catalogDocs gathers a recipient's entry and shelf documents, in the order
// a query returns them, and gives the entries whole: each with the drawers
// of its shelves.
type catalogDocs struct {
	entries []entryDoc
	shelved map[catalog.Key][]drawerMeta
}

// add decodes raw, a document of type t: an entry or a shelf.
func (c *catalogDocs) add(t string, raw []byte) error {
	switch t {
	case typeEntry:
		var d entryDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		c.entries = append(c.entries, d)
	case typeShelf:
		var d shelfDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		if c.shelved == nil {
			c.shelved = map[catalog.Key][]drawerMeta{}
		}
		k := catalog.Key{Origin: domain.Origin(d.Origin), ContentType: d.CT}
		c.shelved[k] = append(c.shelved[k], d.Drawers...)
	}
	return nil
}

// catalog returns the entries gathered.
func (c *catalogDocs) catalog() []catalog.Entry {
	var out []catalog.Entry
	for _, d := range c.entries {
		out = append(out, toEntry(d, c.shelved[catalog.Key{Origin: domain.Origin(d.Origin), ContentType: d.CT}]))
	}
	return out
}

// fromEntry is e as stored: its entry document and its shelves, in order.
// A drawer is shelved when the shelf its start falls in lies wholly before
// the start of the last drawer.
func fromEntry(recipient string, e catalog.Entry) (entryDoc, []shelfDoc) {
	d := entryDoc{ID: entryID(e.Key()), PK: recipient, T: typeEntry, Origin: int32(e.Origin), CT: e.ContentType, Total: e.Total}
	d.Drawers, d.Holes = fromRuns(e.Drawers)
	n := len(d.Drawers)
	if n < 2 {
		return d, nil
	}
	open := d.Drawers[n-1].Start / shelfPositions()
	var shelves []shelfDoc
	i := 0
	for ; i < n-1 && d.Drawers[i].Start/shelfPositions() < open; i++ {
		dm := d.Drawers[i]
		k := dm.Start / shelfPositions()
		if len(shelves) == 0 || shelves[len(shelves)-1].N != k {
			shelves = append(shelves, shelfDoc{ID: shelfID(e.Key(), k), PK: recipient, T: typeShelf, Origin: d.Origin, CT: d.CT, N: k})
		}
		last := &shelves[len(shelves)-1]
		last.Drawers = append(last.Drawers, dm)
	}
	d.Drawers = d.Drawers[i:]
	return d, shelves
}

// shelvesFilledFrom is the shelves of e (as fromEntry stores it) that a
// save writing from position from on fills: those from the shelf where the
// drawer that was last before it may start on (that one may end before
// from: positions an aborted save gave back at its tail are holes). That
// drawer was stored starting where it did, but its runs start after any
// positions given back at its start, and a hole between two drawers' runs
// is neither's: it started no earlier than where the runs of the drawer
// before it end. So a save that only appends to a drawer whose first
// positions became a hole, which now seems to start on a later shelf,
// writes the shelf the drawers before it move onto out of the entry. The
// shelves before were written already; none is written when no drawer
// moves. They are written as upserts, so one that exists changes nothing
// but the charge.
func shelvesFilledFrom(e catalog.Entry, shelves []shelfDoc, from int64) []shelfDoc {
	drawers, _ := fromRuns(e.Drawers)
	i := len(drawers) // the first drawer the save opens, if any
	for i > 0 && drawers[i-1].Start >= from {
		i--
	}
	if i == 0 {
		return shelves // every drawer is new
	}
	lo := drawers[i-1].Start
	if i > 1 {
		lo = min(lo, drawers[i-2].Start+int64(drawers[i-2].Count))
	}
	k := slices.IndexFunc(shelves, func(s shelfDoc) bool { return s.N >= lo/shelfPositions() })
	if k < 0 {
		return nil
	}
	return shelves[k:]
}

func toCursor(d cursorDoc) catalog.Cursor {
	return catalog.Cursor{Origin: domain.Origin(d.Origin), ContentType: d.CT, Acked: d.Acked, HeadSeq: d.HeadSeq, MovedAt: d.MovedAt, Version: d.ETag}
}

func fromCursor(recipient string, c catalog.Cursor) cursorDoc {
	return cursorDoc{ID: cursorID(c.Key()), PK: recipient, T: typeCursor, Origin: int32(c.Origin), CT: c.ContentType, Acked: c.Acked, HeadSeq: c.HeadSeq, MovedAt: c.MovedAt}
}

func toBundle(d bundleDoc) bundle.Record {
	rec := bundle.Record{
		ID: d.Bundle, Origin: domain.Origin(d.Origin), ContentType: d.CT, Group: domain.PeekGroup(d.Group),
		Start: d.Start, End: d.End, Count: d.Count, Weight: d.Weight, DocumentTypes: d.DocTypes,
		NextSeq: d.NextSeq, State: bundle.Pending, CreatedAt: time.UnixMicro(d.CreatedAt), Version: d.ETag,
	}
	switch d.T {
	case typeDequeued:
		rec.State = bundle.Dequeued
		rec.DequeuedAt = time.UnixMicro(d.DequeuedAt)
	case typeReleased:
		rec.State = bundle.Released
		rec.ReleasedAt = time.UnixMicro(d.ReleasedAt)
	}
	rec.Drawers = toRuns(d.Drawers, d.Holes)
	return rec
}

func fromBundle(recipient string, rec bundle.Record) bundleDoc {
	d := bundleDoc{
		ID: bundleDocID(rec.ID), PK: recipient, T: typePending, Bundle: rec.ID, Origin: int32(rec.Origin), CT: rec.ContentType,
		Group: int32(rec.Group), Start: rec.Start, End: rec.End, Count: rec.Count, Weight: rec.Weight,
		NextSeq: rec.NextSeq, CreatedAt: rec.CreatedAt.UnixMicro(),
	}
	// Beyond a few KB the document types are left out and derived from the
	// items whenever the bundle is read back.
	d.DocTypes = bundle.StoredDocumentTypes(rec.DocumentTypes)
	switch rec.State {
	case bundle.Dequeued:
		d.T = typeDequeued
		d.DequeuedAt = rec.DequeuedAt.UnixMicro()
	case bundle.Released:
		d.T = typeReleased
		d.ReleasedAt = rec.ReleasedAt.UnixMicro()
	}
	d.Drawers, d.Holes = fromRuns(rec.Drawers)
	return d
}

func etag(v string) *azcore.ETag {
	e := azcore.ETag(v)
	return &e
}

// Bundle content (internal/content): notices of dequeues and leases of document
// builds, both in the recipient's partition of the recipients container.
const (
	typeNotice = "notice"
	typeLease  = "lease"
)

// noticeDoc says a dequeued bundle's domain is still to be told of it. It is
// written in the dequeue's own batch; its t is the only indexed term no other
// document has, so a query on it reads notices and nothing else.
type noticeDoc struct {
	ID     string `json:"id"`
	PK     string `json:"pk"`
	T      string `json:"t"`
	Bundle string `json:"bid"`
	At     int64  `json:"at"` // dequeued, unix microseconds
	TTL    int32  `json:"ttl"`
}

// leaseDoc lets one instance at a time ask a bundle's domain for its
// document, or sweep (sweeplease.go; that one never expires by TTL).
type leaseDoc struct {
	ID      string `json:"id"`
	PK      string `json:"pk"`
	T       string `json:"t"`
	Holder  string `json:"h"`
	Expires int64  `json:"exp"` // unix milliseconds
	TTL     int32  `json:"ttl,omitempty"`
	ETag    string `json:"_etag,omitempty"`
}

// noticeID names a notice by its bundle and its dequeue time (unix
// microseconds): a bundle id is free again once its record is gone, and the
// notice of its next dequeue is then another document, so neither replaces
// nor removes the other's.
func noticeID(bundleID string, at int64) string {
	return "n:" + bundleID + ":" + strconv.FormatInt(at, 10)
}
func leaseID(bundleID string) string { return "l:" + bundleID }

// keptDoc lists drawers out of the catalog that retained bundles still
// read from, until da (unix microseconds: the dequeue of the last of
// them). Its da is in the index retention reads: once it is past the
// retention, the recipient comes due and the sweep deletes the drawers,
// then the record.
type keptDoc struct {
	ID      string   `json:"id"`
	PK      string   `json:"pk"`
	T       string   `json:"t"`
	Until   int64    `json:"da"`
	Drawers []string `json:"dr"`
}

const typeKept = "kept"

func keptID(id string) string { return "k:" + id }
