package cosmos

import (
	"context"
	"encoding/json"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// backlogQuery reads every recipient's catalog entries, cursors and pending
// bundles in one cross-partition query: a filter on the indexed type and a
// projection, which the gateway serves without a client-side query engine. It is run by the
// metrics refresher (every 15 s, not per scrape) and costs about one RU per
// 1,000 documents read, plus a request per page and partition range.
const backlogQuery = "SELECT c.pk, c.t, c.o, c.ct, c.tot, c.dr, c.ack, c.ca FROM c WHERE c.t = @entry OR c.t = @cursor OR c.t = @pending"

// backlog sums what every recipient has saved and not yet dequeued.
func (s *Store) backlog(ctx context.Context) (store.Backlog, error) {
	type state struct {
		entries []catalog.Entry
		cursors []catalog.Cursor
	}
	byRecipient := map[string]*state{}
	params := []azcosmos.QueryParameter{{Name: "@entry", Value: typeEntry}, {Name: "@cursor", Value: typeCursor}, {Name: "@pending", Value: typePending}}
	var b store.Backlog
	// With this instance's tokens the gauges include its own writes; other
	// instances' may lag by the replica lag.
	pager := s.recipients.NewQueryItemsPager(backlogQuery, azcosmos.NewPartitionKey(),
		&azcosmos.QueryOptions{QueryParameters: params, SessionToken: s.tokens.get(s.recipients.ID())})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return store.Backlog{}, err
		}
		for _, raw := range page.Items {
			var d struct {
				PK      string       `json:"pk"`
				T       string       `json:"t"`
				Origin  int32        `json:"o"`
				CT      string       `json:"ct"`
				Total   int64        `json:"tot"`
				Drawers []drawerMeta `json:"dr"`
				Acked   int64        `json:"ack"`
				Created int64        `json:"ca"` // a pending bundle's, unix microseconds
			}
			if err := json.Unmarshal(raw, &d); err != nil {
				return store.Backlog{}, err
			}
			if d.T == typePending {
				b.AddPending(domain.Origin(d.Origin), time.UnixMicro(d.Created))
				continue
			}
			st := byRecipient[d.PK]
			if st == nil {
				st = &state{}
				byRecipient[d.PK] = st
			}
			if d.T == typeEntry {
				st.entries = append(st.entries, toEntry(entryDoc{Origin: d.Origin, CT: d.CT, Total: d.Total, Drawers: d.Drawers}))
			} else {
				st.cursors = append(st.cursors, toCursor(cursorDoc{Origin: d.Origin, CT: d.CT, Acked: d.Acked}))
			}
		}
	}
	for _, st := range byRecipient {
		b.Add(st.entries, st.cursors)
	}
	return b, nil
}
