package cosmos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"golang.org/x/sync/errgroup"

	"github.com/energydatahub/messagehub/internal/audit"
)

// The audit log is a container of its own, partitioned by recipient. A
// flush of the buffered events writes one document per recipient that has
// events (auditDoc), so its cost follows the recipients, not the events;
// documents expire by their ttl, the retention. A page of one recipient's
// events is a single-partition query by key range.
const containerAudit = "audit" // pk = recipient: audit events, a document per recipient and flush

// auditDoc holds events of one recipient written together, in key order.
// Its id is its first event's key; S and E (indexed) its first and last.
type auditDoc struct {
	ID     string          `json:"id"`
	PK     string          `json:"pk"`
	S      string          `json:"s"`
	E      string          `json:"e"`
	Events []auditDocEvent `json:"ev"`
	TTL    int32           `json:"ttl"`
}

type auditDocEvent struct {
	K       string `json:"k"`
	At      int64  `json:"at"` // unix ms
	Action  int32  `json:"a"`
	Subject string `json:"s,omitempty"`
	Bundle  string `json:"b,omitempty"`
	Detail  string `json:"d,omitempty"`
}

// Bounds of what one flush writes.
const (
	// auditDocBytes bounds a document's events as JSON (Cosmos DB takes
	// 2 MB): a recipient with more in one flush gets several documents.
	auditDocBytes = 512 << 10
	// auditWriters is how many documents one flush writes at once: at a
	// few milliseconds a create, a flush of 10,000 recipients takes about
	// a second. A flush that takes longer leaves more events per recipient
	// to the next, which then writes fewer documents per event.
	auditWriters = 64
	// auditPageDocs is the documents a query asks for per page.
	auditPageDocs = 100
)

// auditQuery reads the documents that may hold events of (@after, @before):
// one partition, ordered by their first key; the events are filtered here.
const (
	auditQuery       = "SELECT * FROM c WHERE c.e > @after ORDER BY c.s"
	auditQueryBefore = "SELECT * FROM c WHERE c.e > @after AND c.s < @before ORDER BY c.s"
)

// auditFloor is the key before which this process hides events: what
// PruneAudit was asked to remove, which ttl removes in its own time.
type auditFloor struct {
	mu  sync.Mutex
	key string
}

func (f *auditFloor) raise(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.key = max(f.key, key)
}

func (f *auditFloor) get() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.key
}

// auditDocs groups events by recipient, in their order, into documents of
// at most auditDocBytes.
func (s *Store) auditDocs(events []audit.Event) ([]auditDoc, error) {
	ttl := int32(s.cfg.Retention / time.Second)
	var docs []auditDoc
	index := map[string]int{} // recipient → its last document in docs
	size := map[string]int{}
	for _, e := range events {
		if _, err := audit.ParseKey(e.Key); err != nil {
			return nil, err
		}
		ev := auditDocEvent{K: e.Key, At: e.At.UnixMilli(), Action: int32(e.Action), Subject: e.Subject, Bundle: e.BundleID, Detail: e.Detail}
		// Its size as stored: JSON escapes some characters in six bytes
		// ("<" is \u003c), so its strings' lengths do not bound it.
		n := len(mustJSON(ev)) + 1
		i, ok := index[e.Recipient]
		if !ok || size[e.Recipient]+n > auditDocBytes {
			docs = append(docs, auditDoc{PK: e.Recipient, TTL: ttl})
			i = len(docs) - 1
			index[e.Recipient], size[e.Recipient] = i, 0
		}
		docs[i].Events = append(docs[i].Events, ev)
		size[e.Recipient] += n
	}
	for i := range docs {
		docs[i].seal()
	}
	return docs, nil
}

// seal orders the document's events and sets its id and bounds.
func (d *auditDoc) seal() {
	slices.SortFunc(d.Events, func(a, b auditDocEvent) int { return strings.Compare(a.K, b.K) })
	d.Events = slices.CompactFunc(d.Events, func(a, b auditDocEvent) bool { return a.K == b.K })
	d.S, d.E = d.Events[0].K, d.Events[len(d.Events)-1].K
	d.ID = d.S
}

// appendAudit writes one document per recipient (more for a recipient with
// very many events), several at once.
func (s *Store) appendAudit(ctx context.Context, events []audit.Event) error {
	docs, err := s.auditDocs(events)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(auditWriters)
	for _, d := range docs {
		g.Go(func() error { return s.writeAuditDoc(ctx, d) })
	}
	return g.Wait()
}

// writeAuditDoc creates d. A document of its id exists when a flush that
// failed (its answer lost) created it, and is written again as it was
// (audit.Log): its events are stored. Those of d that it lacks, were it
// written with fewer, are written as a document of their own.
func (s *Store) writeAuditDoc(ctx context.Context, d auditDoc) error {
	pk := azcosmos.NewPartitionKeyString(d.PK)
	for {
		resp, err := s.audit.CreateItem(ctx, pk, mustJSON(d), nil)
		if err == nil {
			if resp.SessionToken != nil {
				s.tokens.note(containerAudit, *resp.SessionToken)
			}
			return nil
		}
		if !isStatus(err, http.StatusConflict) {
			return err
		}
		// A create's conflict is decided on the primary; read it there too.
		var have auditDoc
		found, err := s.readOnPrimary(ctx, s.audit, d.PK, d.ID, &have)
		if err != nil {
			return err
		}
		if !found {
			continue // expired meanwhile: create it again
		}
		stored := map[string]bool{}
		for _, e := range have.Events {
			stored[e.K] = true
		}
		d.Events = slices.DeleteFunc(d.Events, func(e auditDocEvent) bool { return stored[e.K] })
		if len(d.Events) == 0 {
			return nil
		}
		d.seal()
	}
}

// auditEvents reads the documents that may hold the page's events in order
// of their first key, until the first Limit+1 events of the range are
// known: a document read later starts after them. Documents of several
// instances' flushes may overlap in time, which this merge allows for.
func (s *Store) auditEvents(ctx context.Context, q audit.Query) (audit.Page, error) {
	q.After = max(q.After, s.auditFloor.get(), audit.TimeBound(s.cfg.Now().Add(-s.cfg.Retention)))
	if q.Before != "" && q.Before <= q.After {
		return audit.Page{}, nil
	}
	limit := max(q.Limit, 1)
	query, params := auditQuery, []azcosmos.QueryParameter{{Name: "@after", Value: q.After}}
	if q.Before != "" {
		query = auditQueryBefore
		params = append(params, azcosmos.QueryParameter{Name: "@before", Value: q.Before})
	}
	// Every instance writes the recipient's events: a remedy's at once, the
	// others at its flushes. The query carries the token the partition's
	// primary answers now, so that no replica behind another instance's
	// write answers it (a page would miss the event, and its token go on
	// past it): one request more a page, on an operator's call.
	token, err := s.primaryToken(ctx, s.audit, q.Recipient)
	if err != nil {
		return audit.Page{}, err
	}
	if own := s.tokens.get(containerAudit); own != nil {
		token = mergeTokens(token, *own)
	}
	pager := s.audit.NewQueryItemsPager(query, azcosmos.NewPartitionKeyString(q.Recipient), &azcosmos.QueryOptions{
		QueryParameters: params, PageSizeHint: auditPageDocs, SessionToken: &token,
	})
	var found []audit.Event
	settled := func(nextStart string) bool { return len(found) > limit && nextStart > found[limit].Key }
pages:
	for pager.More() {
		resp, err := pager.NextPage(ctx)
		if err != nil {
			return audit.Page{}, err
		}
		for _, raw := range resp.Items {
			var d auditDoc
			if err := json.Unmarshal(raw, &d); err != nil {
				return audit.Page{}, fmt.Errorf("audit document: %w", err)
			}
			if settled(d.S) {
				break pages
			}
			for _, e := range d.Events {
				if q.Contains(e.K) {
					found = append(found, audit.Event{Key: e.K, At: time.UnixMilli(e.At), Action: audit.Action(e.Action),
						Subject: e.Subject, Recipient: d.PK, BundleID: e.Bundle, Detail: e.Detail})
				}
			}
			slices.SortFunc(found, func(a, b audit.Event) int { return strings.Compare(a.Key, b.Key) })
			found = slices.CompactFunc(found, func(a, b audit.Event) bool { return a.Key == b.Key })
			found = found[:min(len(found), limit+1)] // what sorts after is read again on the next page
		}
	}
	page := audit.Page{Events: found}
	if len(found) > limit {
		page.Events, page.Next = found[:limit], found[limit-1].Key
	}
	return page, nil
}

// pruneAudit hides the events before the time from this process's queries
// at once; their documents' ttl removes them.
func (s *Store) pruneAudit(before time.Time) {
	s.auditFloor.raise(audit.TimeBound(before))
}
