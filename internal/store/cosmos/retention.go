package cosmos

import (
	"context"
	"encoding/json"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/store"
)

// Retention finds what is due through the index of da, the time a dequeued
// bundle's document was dequeued (unix microseconds), which only those
// documents have: one cross-partition query of a range of the index loads
// the documents in that range and no other, so a recipient with nothing due
// and nothing dequeued lately costs the pass nothing. Cosmos DB serves a
// range filter on a path with a range index (the default for /da/? in the
// container's policy). A released bundle's document has no da: it keeps no
// drawer, and its ttl removes it when its retention runs out.
const (
	dueQuery      = "SELECT c.pk FROM c WHERE c.da < @due"
	dueSinceQuery = "SELECT c.pk FROM c WHERE c.da < @due OR c.da >= @since"
)

// dueRecipients lists the recipients with a dequeued bundle dequeued before
// dueBefore or, when since is not zero, at or after since.
func (s *Store) dueRecipients(ctx context.Context, dueBefore, since time.Time, fn func(recipient string) error) error {
	query := dueQuery
	params := []azcosmos.QueryParameter{{Name: "@due", Value: dueBefore.UnixMicro()}}
	if !since.IsZero() {
		query = dueSinceQuery
		params = append(params, azcosmos.QueryParameter{Name: "@since", Value: since.UnixMicro()})
	}
	seen := map[string]bool{}
	var due []string
	pager := s.recipients.NewQueryItemsPager(query, azcosmos.NewPartitionKey(),
		&azcosmos.QueryOptions{QueryParameters: params, PageSizeHint: 1000, SessionToken: s.tokens.get(containerRecipients)})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, raw := range page.Items {
			var d struct {
				PK string `json:"pk"`
			}
			if err := json.Unmarshal(raw, &d); err != nil {
				return err
			}
			if !seen[d.PK] {
				seen[d.PK] = true
				due = append(due, d.PK)
			}
		}
	}
	for _, r := range due {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// DueRecipients is dueRecipients, its errors mapped.
func (s *Store) DueRecipients(ctx context.Context, dueBefore, since time.Time, fn func(recipient string) error) error {
	return storeError(s.dueRecipients(ctx, dueBefore, since, fn))
}

// dequeuedTTLMargin is how long after its retention Cosmos DB deletes a
// dequeued bundle's document that carries a ttl. The sweeper deletes it when
// due, and visits its recipient because it is due (dueRecipients): were the
// TTL to delete it first, nothing would bring the sweeper to the drawers
// its entry keeps for it. The ttl only catches what a stopped sweeper
// leaves.
const dequeuedTTLMargin = 24 * time.Hour

// dequeuedTTL is the ttl of a dequeued bundle's document, in seconds.
func dequeuedTTL(retention time.Duration) int32 {
	return int32((retention + dequeuedTTLMargin) / time.Second) //nolint:gosec // days, far below 2^31 s
}

// retentionQuery reads what a visit of retention decides on, in one query
// of the recipient's partition: its entries and cursors, the dequeued
// bundles and kept drawers' records in either range of the index of da
// (due, or new since the last pass), and a trash record an earlier
// version of the store may have left.
// Retained bundles in between are not loaded: Cosmos DB serves both
// filters from the index (/t/? and the range index of /da/?) and charges
// the documents they load.
const (
	retentionQuery      = "SELECT * FROM c WHERE c.t IN ('entry', 'cursor', 'trash') OR c.da < @due"
	retentionSinceQuery = retentionQuery + " OR c.da >= @since"
)

// loadRetention reads the recipient's retention state. It is not anchored
// on the primary: every sweep write is conditional on what it read, and a
// read behind the primary only sees less acknowledged and less due, so the
// sweep removes less, never more.
func (s *Store) loadRetention(ctx context.Context, recipient string, dueBefore, since time.Time) (store.RetentionState, error) {
	var st store.RetentionState
	query := retentionQuery
	params := []azcosmos.QueryParameter{{Name: "@due", Value: dueBefore.UnixMicro()}}
	if !since.IsZero() {
		query = retentionSinceQuery
		params = append(params, azcosmos.QueryParameter{Name: "@since", Value: since.UnixMicro()})
	}
	trash := false
	err := s.query(ctx, s.recipients, recipient, query, params, func(raw []byte) error {
		var probe struct{ T string }
		if err := json.Unmarshal(raw, &probe); err != nil {
			return err
		}
		switch probe.T {
		case typeEntry:
			return appendDecoded(&st.Entries, raw, toEntry)
		case typeCursor:
			return appendDecoded(&st.Cursors, raw, toCursor)
		case typeDequeued:
			return appendDecoded(&st.Bundles, raw, toBundle)
		case typeKept:
			var d keptDoc
			if err := json.Unmarshal(raw, &d); err != nil {
				return err
			}
			if d.Until < dueBefore.UnixMicro() { // else new since: not due yet
				st.Kept = append(st.Kept, store.Kept{ID: d.ID, Until: time.UnixMicro(d.Until), Drawers: d.Drawers})
			}
		case typeTrash:
			trash = true
		}
		return nil
	})
	if err != nil || !trash {
		return st, err
	}
	// The trash's drawers are out of the catalog read: what was read holds.
	return st, s.emptyTrash(ctx, recipient)
}

// LoadRetention is loadRetention, its errors mapped.
func (s *Store) LoadRetention(ctx context.Context, recipient string, dueBefore, since time.Time) (store.RetentionState, error) {
	st, err := s.loadRetention(ctx, recipient, dueBefore, since)
	return st, storeError(err)
}

// appendDecoded decodes raw as a D and appends it, converted, to out.
func appendDecoded[D, R any](out *[]R, raw []byte, conv func(D) R) error {
	var d D
	if err := json.Unmarshal(raw, &d); err != nil {
		return err
	}
	*out = append(*out, conv(d))
	return nil
}
