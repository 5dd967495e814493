package cosmos

import (
	"context"
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

// backlogOfQuery is the recount's query for one recipient. An entry's holes
// (h) come with its drawers: the hub counts the runs around them, and an
// aborted save's positions are no notification.
const backlogOfQuery = "SELECT c.pk, c.t, c.o, c.ct, c.tot, c.dr, c.h, c.ack, c.ca FROM c WHERE c.t IN ('entry', 'shelf', 'cursor', 'pending')"

// changedBacklog reads the change feed from cursor on and each recipient
// it names.
func (s *Store) changedBacklog(ctx context.Context, cursor string) (store.BacklogChanges, error) {
	var out store.BacklogChanges
	changed := map[string]bool{}
	var order []string
	var from *time.Time
	if cursor == "" {
		t := time.Now().Add(-feedStartMargin)
		from = &t
	}
	next, cost, err := followFeed(withSessionToken(ctx, s.tokens.get(containerRecipients)), s.recipients, cursor, from, func(docs [][]byte, token string) error {
		// The recipients named are read next with this store's tokens:
		// without the page's, a replica behind it could serve them their
		// state before the change, which the feed, gone on past it, would
		// not name again. From no cursor, the pages up to the present name
		// none, and the recount that follows (ScanBacklog) reads with
		// their tokens for the same reason.
		s.tokens.note(containerRecipients, token)
		for _, raw := range docs {
			pk, err := recipientOf(raw)
			if err != nil {
				return err
			}
			if !changed[pk] && !strings.HasPrefix(pk, "_") { // not the registry, leases, figures...
				changed[pk] = true
				order = append(order, pk)
			}
		}
		return nil
	})
	out.Cost += cost
	if err != nil {
		return out, err
	}
	cursor = next
	out.Cursor = cursor
	var mu sync.Mutex
	records := make([]store.RecipientRecords, len(order))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(changesParallel)
	for i, pk := range order {
		g.Go(func() error {
			r := backlogOf{records: store.RecipientRecords{Recipient: pk}}
			cost, err := s.queryCharged(gctx, azcosmos.NewPartitionKeyString(pk), backlogOfQuery, r.add)
			mu.Lock()
			out.Cost += cost
			mu.Unlock()
			records[i] = r.done()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return out, err
	}
	out.Recipients = records
	return out, nil
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
