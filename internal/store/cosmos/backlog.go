package cosmos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// The backlog figures (store.Figures). A recount reads every recipient's
// catalog entries, cursors and pending bundles in one cross-partition query
// (a filter on the indexed t and a projection, which the gateway serves
// without a client-side query engine). Cosmos DB charges a query by the
// documents it loads, not by the bytes it returns, so a recount costs in
// proportion to every recipient's cabinets: only the holder of the figures
// lease runs it, with a low-priority context, and paces the next by what
// this one cost (internal/figures). The result is three documents in a
// partition of their own, each replaced whole: the totals (under a KB: what
// every instance's gauges read, one point read each), the lists of
// recipients and the history (read by the admin calls only).

// figuresPartition holds the figures' documents and their lease.
const figuresPartition = "_figures"

// The figures' documents and lease.
const (
	figuresTotalsID  = "totals"
	figuresListsID   = "lists"
	figuresHistoryID = "history"
	figuresLeaseID   = "lease"
	typeFigures      = "figures"
)

// backlogQuery reads what a recount needs of every recipient (across
// partitions), and of one whose saves it settles (in its partition): its
// backlog, as backlogOfQuery, and its head, whose reservations are the
// saves in flight, or that died in flight (heldHeads).
const backlogQuery = "SELECT " + backlogFields + " FROM c WHERE c.t IN ('head', 'entry', 'shelf', 'cursor', 'pending')"

// backlogWithoutHeadsQuery is backlogQuery without the heads, for a
// recount that knows them (heldHeads).
const backlogWithoutHeadsQuery = backlogOfQuery

// figuresDoc is one part of the figures.
type figuresDoc struct {
	ID string `json:"id"`
	PK string `json:"pk"`
	T  string `json:"t"`
	store.BacklogFigures
}

// scanBacklog reads every recipient's entries, cursors and pending bundles
// and calls fn once per recipient; it returns the request units the query
// cost. It reads the heads too unless this store has followed them since
// its last recount that did (heldHeads), and settles the saves whose
// reservations outlived their lease (settledBacklogOf).
func (s *Store) scanBacklog(ctx context.Context, fn func(store.RecipientRecords) error) (float64, error) {
	heads := !s.held.isComplete()
	sql := backlogWithoutHeadsQuery
	if heads {
		sql = backlogQuery
		s.held.forgetHeads()
	}
	byRecipient := map[string]*backlogOf{}
	var order []string
	// With this instance's tokens the recount includes its own writes;
	// other instances' may lag by the replica lag.
	cost, err := s.queryCharged(ctx, azcosmos.NewPartitionKey(), sql, func(raw []byte) error {
		pk, err := recipientOf(raw)
		if err != nil {
			return err
		}
		r := byRecipient[pk]
		if r == nil {
			r = &backlogOf{records: store.RecipientRecords{Recipient: pk}}
			byRecipient[pk] = r
			order = append(order, pk)
		}
		return r.add(raw)
	})
	if err != nil {
		return cost, err
	}
	if heads {
		for _, pk := range order {
			s.held.note(pk, byRecipient[pk].heldUntil)
		}
	}
	settle := map[string]bool{}
	for _, pk := range s.held.ended(s.cfg.Now().UnixMilli()) {
		settle[pk] = true
		if byRecipient[pk] == nil { // nothing but its head and reservation
			byRecipient[pk] = &backlogOf{records: store.RecipientRecords{Recipient: pk}}
			order = append(order, pk)
		}
	}
	for _, pk := range order {
		r := byRecipient[pk].done()
		if settle[pk] {
			var c float64
			r, c, err = s.settledBacklogOf(ctx, pk)
			if cost += c; err != nil {
				return cost, err
			}
		}
		if len(r.Entries) == 0 && len(r.Cursors) == 0 && len(r.Pending) == 0 {
			continue // a head alone: nothing saved that retention has not removed
		}
		if err := fn(r); err != nil {
			return cost, err
		}
	}
	if heads {
		s.held.counted()
	}
	return cost, nil
}

// heldHeads are the recipients whose head, as the figures' holder last read
// it, holds reservations, each with the end of the earliest lease (unix
// ms). A save takes its positions in the catalog with its reservation, so
// the figures count its notifications as waiting from then on. A save whose
// process dies before its commit writes nothing more: its positions are no
// notification a Peek could deliver (the first load of the recipient once
// the lease has ended aborts the save and makes them a hole), yet the
// change feed names the recipient no more, and for an actor that never
// polls they would count for good. So the holder settles such a save itself
// once the lease has ended (settledBacklogOf), as a load would.
//
// It learns the heads from a recount that reads them with the rest (a
// document more per recipient) and from then on from the change feed, which
// carries every head a save wrote (a finished save's last write drops its
// reservation): complete says that the feed was followed without a gap from
// before that recount to last, the cursor this store's reading of the feed
// reached at lastAt. A later recount then reads no head: it first follows
// the feed from last (changedBacklog), and only the settle of a save whose
// lease ended reads one. A holder that starts afresh (it takes the lease
// over, or its last reading of the feed is older than heldResumeWithin)
// reads them all again.
type heldHeads struct {
	mu       sync.Mutex
	m        map[string]int64
	complete bool
	last     string
	lastAt   int64
}

// heldResumeWithin is how old the last reading of the feed may be for a
// recount to go on from it rather than read every head: a holder reads it
// every minute, and one that did not for longer may have lost the lease
// meanwhile, the changes since then costing more to follow than the heads
// to read.
const heldResumeWithin = 10 * time.Minute

// reset forgets every head.
func (h *heldHeads) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.m, h.complete, h.last = nil, false, ""
}

// forgetHeads forgets every head, not where the feed was read to: a
// recount reads them all again.
func (h *heldHeads) forgetHeads() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.m, h.complete = nil, false
}

// counted says that a recount read every head since the feed's cursor
// last.
func (h *heldHeads) counted() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.complete = true
}

func (h *heldHeads) isComplete() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.complete
}

// followed records that the feed was read up to cursor at now (unix ms).
func (h *heldHeads) followed(cursor string, now int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last, h.lastAt = cursor, now
}

// resumable returns the cursor a recount at now goes on from, when the
// heads are known up to it.
func (h *heldHeads) resumable(now int64) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last, h.complete && h.last != "" && now-h.lastAt <= heldResumeWithin.Milliseconds()
}

// note records the recipient's head as read: reservations held until
// until, or none (0).
func (h *heldHeads) note(recipient string, until int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if until == 0 {
		delete(h.m, recipient)
		return
	}
	if h.m == nil {
		h.m = map[string]int64{}
	}
	h.m[recipient] = until
}

// ended returns the recipients a reservation of whose head has outlived
// its lease at now (unix ms).
func (h *heldHeads) ended(now int64) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for r, until := range h.m {
		if until < now {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// settledBacklogOf settles the saves whose reservations in the recipient's
// head outlived their lease (resolveExpired: finalized if committed, else
// aborted and rolled back) and reads the recipient's backlog and head
// again. A settle that fails is logged and the recipient read as it is:
// the next update tries again.
func (s *Store) settledBacklogOf(ctx context.Context, recipient string) (store.RecipientRecords, float64, error) {
	if err := s.resolveExpired(ctx, recipient); err != nil && !errors.Is(err, store.ErrConflict) {
		if ctx.Err() != nil {
			return store.RecipientRecords{}, 0, err
		}
		s.cfg.Logger.Warn("cosmos: the backlog figures could not settle a save whose lease ended; they count its notifications until an update that does",
			"recipient", recipient, "err", err)
	}
	b := backlogOf{records: store.RecipientRecords{Recipient: recipient}}
	cost, err := s.queryCharged(ctx, azcosmos.NewPartitionKeyString(recipient), backlogQuery, b.add)
	if err != nil {
		return store.RecipientRecords{}, cost, err
	}
	s.held.note(recipient, b.heldUntil)
	return b.done(), cost, nil
}

// backlogDoc is what a recount reads of an entry, a cursor, a pending
// bundle or a head.
type backlogDoc struct {
	heldDoc
	Origin  int32        `json:"o"`
	CT      string       `json:"ct"`
	Total   int64        `json:"tot"`
	Drawers []drawerMeta `json:"dr"`
	Acked   int64        `json:"ack"`
	Created int64        `json:"ca"` // a pending bundle's, unix microseconds
}

// heldDoc is what the figures read of any document of the recipients
// container (the change feed carries them all): its partition, its type
// and, a head's, its reservations' leases.
type heldDoc struct {
	PK   string `json:"pk"`
	T    string `json:"t"`
	Held []struct {
		Expires int64 `json:"exp"` // unix ms
	} `json:"res"`
}

// heldUntil is the end of the earliest lease of a head's reservations
// (unix ms); 0 when it has none.
func (d heldDoc) heldUntil() int64 {
	var until int64
	for _, r := range d.Held {
		if until == 0 || r.Expires < until {
			until = r.Expires
		}
	}
	return until
}

func recipientOf(raw []byte) (string, error) {
	var d struct {
		PK string `json:"pk"`
	}
	err := json.Unmarshal(raw, &d)
	return d.PK, err
}

// backlogOf gathers one recipient's documents of the backlog query, in
// the order the query returns them.
type backlogOf struct {
	records store.RecipientRecords
	cat     catalogDocs
	// heldUntil is when the earliest lease of the head's reservations
	// ends (unix ms), when the head was read; 0 when none.
	heldUntil int64
}

// add adds one document of the backlog query.
func (b *backlogOf) add(raw []byte) error {
	var d backlogDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return err
	}
	switch d.T {
	case typeHead:
		b.heldUntil = d.heldUntil()
	case typeEntry, typeShelf:
		return b.cat.add(d.T, raw)
	case typeCursor:
		b.records.Cursors = append(b.records.Cursors, toCursor(cursorDoc{Origin: d.Origin, CT: d.CT, Acked: d.Acked}))
	case typePending:
		b.records.Pending = append(b.records.Pending, store.PendingBundle{Origin: domain.Origin(d.Origin), Created: time.UnixMicro(d.Created)})
	}
	return nil
}

// done returns the recipient's records, each entry with its shelves'
// drawers.
func (b *backlogOf) done() store.RecipientRecords {
	b.records.Entries = b.cat.catalog()
	return b.records
}

// writeFigures replaces the totals and the parts named if holder holds the
// figures lease: one batch that also replaces the lease, unchanged, on the
// etag read on the primary. A holder that stalled past its lease (a pause,
// a slow request) while another took it over finds the lease changed, and
// its figures, older than the new holder's, are refused (store.ErrNotHolder)
// rather than replacing them. One batch, so a reader never sees new totals
// with older lists. It costs a read on the primary and the lease's replace
// more than the parts' writes.
func (s *Store) writeFigures(ctx context.Context, holder string, f store.BacklogFigures, parts store.FigureParts) error {
	var lease leaseDoc
	found, err := s.readOnPrimary(ctx, s.recipients, figuresPartition, figuresLeaseID, &lease)
	if err != nil {
		return err
	}
	if !found || lease.Holder != holder {
		return fmt.Errorf("%w: the figures lease is %q's, not %q's", store.ErrNotHolder, lease.Holder, holder)
	}
	key := azcosmos.NewPartitionKeyString(figuresPartition)
	b := s.recipients.NewTransactionalBatch(key)
	held := etag(lease.ETag)
	lease.ETag = ""
	raw, err := json.Marshal(lease)
	if err != nil {
		return err
	}
	b.ReplaceItem(figuresLeaseID, raw, &azcosmos.TransactionalBatchItemOptions{IfMatchETag: held})
	var docs []figuresDoc
	if parts&store.FigureLists != 0 {
		docs = append(docs, figuresDoc{ID: figuresListsID, BacklogFigures: store.BacklogFigures{ComputedAt: f.ComputedAt, Oldest: f.Oldest, Largest: f.Largest}})
	}
	if parts&store.FigureHistory != 0 {
		docs = append(docs, figuresDoc{ID: figuresHistoryID, BacklogFigures: store.BacklogFigures{ComputedAt: f.ComputedAt, History: f.History}})
	}
	f.Oldest, f.Largest, f.History = nil, nil, nil
	docs = append(docs, figuresDoc{ID: figuresTotalsID, BacklogFigures: f})
	for _, d := range docs {
		d.PK, d.T = figuresPartition, typeFigures
		raw, err := json.Marshal(d)
		if err != nil {
			return err
		}
		b.UpsertItem(raw, nil)
	}
	err = s.execute(ctx, s.recipients, b)
	if !errors.Is(err, store.ErrConflict) {
		return err
	}
	// The lease changed since the read: taken over or given up, or
	// replaced by this very batch, resent after its answer was lost. Only
	// this writer replaces its lease unchanged, so a lease still holder's
	// says the batch applied.
	var now leaseDoc
	if found, err := s.readOnPrimary(ctx, s.recipients, figuresPartition, figuresLeaseID, &now); err != nil || (found && now.Holder == holder) {
		return err
	}
	return fmt.Errorf("%w: the figures lease was taken over or given up", store.ErrNotHolder)
}

// readFigures reads the totals and the parts asked for, one point read
// each; figures never written are zero.
func (s *Store) readFigures(ctx context.Context, parts store.FigureParts) (store.BacklogFigures, error) {
	f, err := s.readFiguresDoc(ctx, figuresTotalsID)
	if err != nil {
		return f, err
	}
	if parts&store.FigureLists != 0 {
		l, err := s.readFiguresDoc(ctx, figuresListsID)
		if err != nil {
			return f, err
		}
		f.Oldest, f.Largest = l.Oldest, l.Largest
	}
	if parts&store.FigureHistory != 0 {
		h, err := s.readFiguresDoc(ctx, figuresHistoryID)
		if err != nil {
			return f, err
		}
		f.History = h.History
	}
	return f, nil
}

func (s *Store) readFiguresDoc(ctx context.Context, id string) (store.BacklogFigures, error) {
	resp, err := s.readItem(ctx, s.recipients, azcosmos.NewPartitionKeyString(figuresPartition), id, "")
	if isStatus(err, http.StatusNotFound) {
		// None yet, or a replica behind the first write: figures are
		// approximate, and the next read finds them.
		return store.BacklogFigures{}, nil
	}
	if err != nil {
		return store.BacklogFigures{}, err
	}
	var d figuresDoc
	err = json.Unmarshal(resp.Value, &d)
	return d.BacklogFigures, err
}

// holdFiguresLease takes the figures lease for holder until d from now, or
// extends it when holder has it (takeLease).
func (s *Store) holdFiguresLease(ctx context.Context, holder string, d time.Duration) (bool, error) {
	cur, err := s.takeLease(ctx, figuresPartition, figuresLeaseID, holder, d, 0)
	return err == nil && cur.Holder == holder, err
}

// releaseFiguresLease ends holder's figures lease, if it still has it.
func (s *Store) releaseFiguresLease(ctx context.Context, holder string) error {
	return s.dropLease(ctx, figuresPartition, figuresLeaseID, holder)
}

// ScanBacklog is scanBacklog, its errors mapped.
func (s *Store) ScanBacklog(ctx context.Context, fn func(store.RecipientRecords) error) (float64, error) {
	v, err := s.scanBacklog(ctx, fn)
	return v, storeError(err)
}

// WriteFigures is writeFigures, its errors mapped.
func (s *Store) WriteFigures(ctx context.Context, holder string, f store.BacklogFigures, parts store.FigureParts) error {
	return storeError(s.writeFigures(ctx, holder, f, parts))
}

// ReadFigures is readFigures, its errors mapped.
func (s *Store) ReadFigures(ctx context.Context, parts store.FigureParts) (store.BacklogFigures, error) {
	v, err := s.readFigures(ctx, parts)
	return v, storeError(err)
}

// HoldFiguresLease is holdFiguresLease, its errors mapped.
func (s *Store) HoldFiguresLease(ctx context.Context, holder string, d time.Duration) (bool, error) {
	v, err := s.holdFiguresLease(ctx, holder, d)
	return v, storeError(err)
}

// ReleaseFiguresLease is releaseFiguresLease, its errors mapped.
func (s *Store) ReleaseFiguresLease(ctx context.Context, holder string) error {
	return storeError(s.releaseFiguresLease(ctx, holder))
}
