package cosmos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// backlogQuery reads what a recount needs of every recipient (the same
// query as backlogOfQuery, across partitions).
const backlogQuery = backlogOfQuery

// figuresDoc is one part of the figures.
type figuresDoc struct {
	ID string `json:"id"`
	PK string `json:"pk"`
	T  string `json:"t"`
	store.BacklogFigures
}

// scanBacklog reads every recipient's entries, cursors and pending bundles
// and calls fn once per recipient; it returns the request units the query
// cost.
func (s *Store) scanBacklog(ctx context.Context, fn func(store.RecipientRecords) error) (float64, error) {
	byRecipient := map[string]*backlogOf{}
	var order []string
	// With this instance's tokens the recount includes its own writes;
	// other instances' may lag by the replica lag.
	cost, err := s.queryCharged(ctx, azcosmos.NewPartitionKey(), backlogQuery, func(raw []byte) error {
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
	for _, pk := range order {
		if err := fn(byRecipient[pk].done()); err != nil {
			return cost, err
		}
	}
	return cost, nil
}

// backlogDoc is what a recount reads of an entry, a cursor or a pending
// bundle.
type backlogDoc struct {
	PK      string       `json:"pk"`
	T       string       `json:"t"`
	Origin  int32        `json:"o"`
	CT      string       `json:"ct"`
	Total   int64        `json:"tot"`
	Drawers []drawerMeta `json:"dr"`
	Acked   int64        `json:"ack"`
	Created int64        `json:"ca"` // a pending bundle's, unix microseconds
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
}

// add adds one document of the backlog query.
func (b *backlogOf) add(raw []byte) error {
	var d backlogDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return err
	}
	switch d.T {
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
