package cosmos

import (
	"context"
	"encoding/json"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
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
