package cosmos

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"golang.org/x/sync/errgroup"

	"github.com/energydatahub/messagehub/internal/store"
)

// The backlog figures between recounts follow the recipients container's
// change feed (latest version mode, pull model; the cursor is the SDK's
// continuation token, which the figures' holder keeps in memory). A
// recipient whose documents changed is read again whole, with the
// recount's query scoped to its partition: the change feed carries no
// deletes, and a read of the recipient's state decides exactly. A recipient
// that changed nothing is not read at all, so the figures cost what
// changed. The feed reads every document type (heads, slots, notices...);
// only the recipients' own partitions count.

const (
	// changesParallel bounds the recipients read at once.
	changesParallel = 8
	// feedStartMargin is how far before now a new cursor starts: the
	// server's clock decides what changed since, and a change read twice
	// costs a read, one missed a wrong figure until the next recount.
	feedStartMargin = 5 * time.Second
)

// backlogFields are what the figures read of a recipient's documents. An
// entry's holes (h) come with its drawers: the hub counts the runs around
// them, and an aborted save's positions are no notification. A head's
// reservations (res) say which saves hold positions not yet visible.
const backlogFields = "c.pk, c.t, c.o, c.ct, c.tot, c.dr, c.h, c.ack, c.ca, c.res"

// backlogOfQuery reads one changed recipient's backlog; its head comes
// with the change feed whenever a save wrote it (heldHeads).
const backlogOfQuery = "SELECT " + backlogFields + " FROM c WHERE c.t IN ('entry', 'shelf', 'cursor', 'pending')"

// changedBacklog reads the change feed from cursor on and each recipient
// it names.
func (s *Store) changedBacklog(ctx context.Context, cursor string) (store.BacklogChanges, error) {
	var out store.BacklogChanges
	changed := map[string]bool{}
	var order []string
	var from *time.Time
	if cursor == "" {
		if next, ok := s.followHeads(ctx, &out); ok {
			out.Cursor = next
			return out, nil
		}
		t := time.Now().Add(-feedStartMargin)
		from = &t
		s.held.reset() // the changes before are not followed: the recount that follows reads the heads
	}
	next, cost, err := followFeed(withSessionToken(ctx, s.tokens.get(containerRecipients)), s.recipients, cursor, from, func(docs [][]byte, token string) error {
		// The recipients named are read next with this store's tokens:
		// without the page's, a replica behind it could serve them their
		// state before the change, which the feed, gone on past it, would
		// not name again. From no cursor, the pages up to the present name
		// none, and the recount that follows (ScanBacklog) reads with
		// their tokens for the same reason.
		s.tokens.note(containerRecipients, token)
		return s.noteChanged(docs, func(pk string) {
			if !changed[pk] {
				changed[pk] = true
				order = append(order, pk)
			}
		})
	})
	out.Cost += cost
	if err != nil {
		return out, err
	}
	s.held.followed(next, s.cfg.Now().UnixMilli())
	// A save whose process died in flight changes nothing more once its
	// reservation is written: the feed does not name its recipient again.
	settle := map[string]bool{}
	for _, pk := range s.held.ended(s.cfg.Now().UnixMilli()) {
		settle[pk] = true
		if !changed[pk] {
			changed[pk] = true
			order = append(order, pk)
		}
	}
	cursor = next
	out.Cursor = cursor
	var mu sync.Mutex
	records := make([]store.RecipientRecords, len(order))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(changesParallel)
	for i, pk := range order {
		g.Go(func() error {
			var cost float64
			var err error
			if settle[pk] {
				records[i], cost, err = s.settledBacklogOf(gctx, pk)
			} else {
				r := backlogOf{records: store.RecipientRecords{Recipient: pk}}
				cost, err = s.queryCharged(gctx, azcosmos.NewPartitionKeyString(pk), backlogOfQuery, r.add)
				records[i] = r.done()
			}
			mu.Lock()
			out.Cost += cost
			mu.Unlock()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return out, err
	}
	out.Recipients = records
	return out, nil
}

// noteChanged calls fn with the recipient of each of the feed's documents,
// leaving out the partitions that are no recipient's (the registry,
// leases, figures...), and notes the heads among them (heldHeads).
func (s *Store) noteChanged(docs [][]byte, fn func(recipient string)) error {
	for _, raw := range docs {
		var d heldDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		if strings.HasPrefix(d.PK, "_") {
			continue
		}
		if d.T == typeHead {
			s.held.note(d.PK, d.heldUntil())
		}
		fn(d.PK)
	}
	return nil
}

// followHeads is the present (changedBacklog's empty cursor) for a holder
// that knows the heads up to its last reading of the feed (heldHeads): it
// follows the feed on from there, noting the heads it carries and naming no
// recipient, so that the recount that follows need not read the heads. It
// reports false when the heads are not known so, or the feed could not be
// followed: the present is then found afresh.
func (s *Store) followHeads(ctx context.Context, out *store.BacklogChanges) (string, bool) {
	last, ok := s.held.resumable(s.cfg.Now().UnixMilli())
	if !ok {
		return "", false
	}
	next, cost, err := followFeed(withSessionToken(ctx, s.tokens.get(containerRecipients)), s.recipients, last, nil, func(docs [][]byte, token string) error {
		s.tokens.note(containerRecipients, token) // the recount reads at least as fresh
		return s.noteChanged(docs, func(string) {})
	})
	out.Cost += cost
	if err != nil {
		if ctx.Err() != nil {
			return "", false
		}
		s.cfg.Logger.Warn("cosmos: the backlog figures could not follow the change feed on; the recount reads every head", "err", err)
		return "", false
	}
	s.held.followed(next, s.cfg.Now().UnixMilli())
	return next, true
}

// queryCharged runs a query of the recipients container (within one
// partition, or across them with the empty key), as fresh as this store's
// session tokens, and returns what it cost.
func (s *Store) queryCharged(ctx context.Context, pk azcosmos.PartitionKey, sql string, fn func([]byte) error) (float64, error) {
	pager := s.recipients.NewQueryItemsPager(sql, pk,
		&azcosmos.QueryOptions{PageSizeHint: 1000, SessionToken: s.tokens.get(containerRecipients)})
	var cost float64
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return cost, err
		}
		cost += float64(page.RequestCharge)
		for _, raw := range page.Items {
			if err := fn(raw); err != nil {
				return cost, err
			}
		}
	}
	return cost, nil
}

// ChangedBacklog is changedBacklog, its errors mapped.
func (s *Store) ChangedBacklog(ctx context.Context, cursor string) (store.BacklogChanges, error) {
	v, err := s.changedBacklog(ctx, cursor)
	return v, storeError(err)
}
