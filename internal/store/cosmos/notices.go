package cosmos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// The outbox of dequeues. A transactional batch stays within one
// partition, so a notice lives in its recipient's partition, written by the
// dequeue's own batch: the dequeue and its notice commit together or not at
// all. Notices are found across partitions through the index of t, where
// "notice:<domain>" is a term only a domain's notices have: the query reads
// the notices of the domains asked for and no other document (a sparse
// index, without a policy change), one page per physical partition that
// holds any. A delivered notice is deleted; one never delivered expires
// with its bundle; a later bundle of its id (once retention removed its
// bundle early) has a notice of its own, named by its dequeue time too.

// noticeType is the t of a domain's notices.
func noticeType(o domain.Origin) string {
	return typeNotice + ":" + strconv.Itoa(int(o))
}

// noticeOrigin reads the domain back from a notice's t.
func noticeOrigin(t string) domain.Origin {
	_, o, _ := strings.Cut(t, ":")
	n, _ := strconv.Atoi(o)
	return domain.Origin(n) //nolint:gosec // written from an origin
}

// noticesQuery reads the notices of the domains: an IN over their terms of
// the t index (integers formatted here, so the text is safe to build).
func noticesQuery(origins []domain.Origin) string {
	terms := make([]string, len(origins))
	for i, o := range origins {
		terms[i] = "'" + noticeType(o) + "'"
	}
	return "SELECT c.pk, c.bid, c.at, c.t FROM c WHERE c.t IN (" + strings.Join(terms, ", ") + ")"
}

// allNotices is every domain a notice may have.
var allNotices = domain.Origins

func (s *Store) notice(recipient string, rec bundle.Record) noticeDoc {
	return noticeDoc{
		ID: noticeID(rec.ID, rec.DequeuedAt.UnixMicro()), PK: recipient, T: noticeType(rec.Origin), Bundle: rec.ID,
		At: rec.DequeuedAt.UnixMicro(), TTL: int32(s.cfg.Retention / time.Second),
	}
}

// listNotices returns up to limit notices of the domains, oldest first among
// those read. Cosmos DB has no cross-partition order through the Go SDK and
// answers partition key range after range, so a look goes on where the
// last one stopped (its continuation), wrapping round at the end: with a
// backlog larger than a batch, every range still gets its turn.
func (s *Store) listNotices(ctx context.Context, origins []domain.Origin, limit int) ([]store.Notice, error) {
	if len(origins) == 0 || limit <= 0 {
		return nil, nil
	}
	query := noticesQuery(origins)
	token := s.noticesAt.take(query)
	wrapped := token == ""
	seen := map[string]bool{}
	var out []store.Notice
	for len(out) < limit {
		page, next, err := s.noticePage(ctx, query, token, limit-len(out))
		if err != nil {
			// A continuation the account no longer takes would fail every
			// later look: the next one starts from the beginning.
			s.noticesAt.put(query, "")
			return nil, err
		}
		for _, n := range page {
			key := n.Recipient + "/" + noticeID(n.BundleID, n.DequeuedAt.UnixMicro())
			if !seen[key] { // read again after wrapping round
				seen[key] = true
				out = append(out, n)
			}
		}
		if next != "" && next == token && len(page) == 0 {
			break // no progress: never spin on a token
		}
		token = next
		if token == "" {
			if wrapped {
				break
			}
			wrapped = true // the end: fill the batch from the beginning
		}
	}
	s.noticesAt.put(query, token)
	slices.SortFunc(out, func(a, b store.Notice) int { return a.DequeuedAt.Compare(b.DequeuedAt) })
	return out, nil
}

// noticePage reads one page of up to n notices from the continuation token
// ("" is the beginning) and returns the token of the rest ("" at the end).
func (s *Store) noticePage(ctx context.Context, query, token string, n int) ([]store.Notice, string, error) {
	opts := &azcosmos.QueryOptions{PageSizeHint: int32(min(n, 1000)), SessionToken: s.tokens.get(containerRecipients)} //nolint:gosec // at most 1000
	if token != "" {
		opts.ContinuationToken = &token
	}
	resp, err := s.recipients.NewQueryItemsPager(query, azcosmos.NewPartitionKey(), opts).NextPage(ctx)
	if err != nil {
		return nil, "", err
	}
	if resp.RawResponse != nil {
		// The bundle read next must see the dequeue (eachNotice).
		s.tokens.note(containerRecipients, resp.RawResponse.Header.Get("x-ms-session-token"))
	}
	var out []store.Notice
	for _, raw := range resp.Items {
		var d noticeDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, "", err
		}
		out = append(out, store.Notice{Recipient: d.PK, BundleID: d.Bundle, Origin: noticeOrigin(d.T), DequeuedAt: time.UnixMicro(d.At)})
	}
	next := ""
	if resp.ContinuationToken != nil {
		next = *resp.ContinuationToken
	}
	return out, next, nil
}

// noticeResume keeps the continuation of the last look of each query (a
// token belongs to its query text): the per-domain workers of a notifier
// each go on where their own last look stopped. The queries are the
// subsets of domains asked for, so few; the map is bounded all the same.
type noticeResume struct {
	mu     sync.Mutex
	tokens map[string]string
}

// maxResumes bounds the queries whose continuation is kept.
const maxResumes = 64

func (r *noticeResume) take(query string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tokens[query]
}

func (r *noticeResume) put(query, token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tokens == nil {
		r.tokens = map[string]string{}
	}
	if _, ok := r.tokens[query]; !ok && len(r.tokens) >= maxResumes {
		clear(r.tokens)
	}
	r.tokens[query] = token
}

// noticeBacklog reads every notice's time: a few bytes each.
func (s *Store) noticeBacklog(ctx context.Context) (int, time.Time, error) {
	var n int
	var oldest time.Time
	err := s.eachNotice(ctx, allNotices, 1000, func(notice store.Notice) bool {
		if n == 0 || notice.DequeuedAt.Before(oldest) {
			oldest = notice.DequeuedAt
		}
		n++
		return true
	})
	return n, oldest, err
}

// eachNotice runs the notices query across partitions until fn says stop.
// The answers' session tokens are kept, so that this process's reads of a
// notice's bundle see the dequeue that wrote it (a replica that lags behind
// the one that answered would say the bundle is gone).
func (s *Store) eachNotice(ctx context.Context, origins []domain.Origin, page int32, fn func(store.Notice) bool) error {
	pager := s.recipients.NewQueryItemsPager(noticesQuery(origins), azcosmos.NewPartitionKey(),
		&azcosmos.QueryOptions{PageSizeHint: page, SessionToken: s.tokens.get(containerRecipients)})
	for pager.More() {
		resp, err := pager.NextPage(ctx)
		if err != nil {
			return err
		}
		if resp.RawResponse != nil {
			s.tokens.note(containerRecipients, resp.RawResponse.Header.Get("x-ms-session-token"))
		}
		for _, raw := range resp.Items {
			var d noticeDoc
			if err := json.Unmarshal(raw, &d); err != nil {
				return err
			}
			n := store.Notice{Recipient: d.PK, BundleID: d.Bundle, Origin: noticeOrigin(d.T), DequeuedAt: time.UnixMicro(d.At)}
			if !fn(n) {
				return nil
			}
		}
	}
	return nil
}

// dequeuedBundle reads one dequeued bundle's document: a point read, with
// the container's token, which holds the token of the notices query that
// found its notice (eachNotice), so a lagging replica cannot miss it.
func (s *Store) dequeuedBundle(ctx context.Context, recipient, bundleID string) (bundle.Record, error) {
	var d bundleDoc
	resp, err := s.readItem(ctx, s.recipients, azcosmos.NewPartitionKeyString(recipient), bundleDocID(bundleID), "")
	switch {
	case isStatus(err, http.StatusNotFound):
		// A 404 (1002: no replica caught up with the token) drops the
		// notice unheard if wrong: only the primary's answer decides.
		found, err := s.readOnPrimary(ctx, s.recipients, recipient, bundleDocID(bundleID), &d)
		if err != nil {
			return bundle.Record{}, err
		}
		if !found {
			return bundle.Record{}, fmt.Errorf("%w: no dequeued bundle %s", domain.ErrNotFound, bundleID)
		}
	case err != nil:
		return bundle.Record{}, err
	default:
		if err := json.Unmarshal(resp.Value, &d); err != nil {
			return bundle.Record{}, err
		}
	}
	if d.T != typeDequeued {
		// The token holds the notice's write, hence its dequeue's (one
		// batch): a bundle read pending is not dequeued.
		return bundle.Record{}, fmt.Errorf("%w: bundle %s is not dequeued", domain.ErrNotFound, bundleID)
	}
	return toBundle(d), nil
}

// removeNotices deletes delivered notices, one batch per recipient (up to
// 100 each); a batch that finds one already gone falls back to single
// deletes, which ignore missing notices.
func (s *Store) removeNotices(ctx context.Context, notices []store.Notice) error {
	byRecipient := map[string][]string{}
	for _, n := range notices {
		byRecipient[n.Recipient] = append(byRecipient[n.Recipient], noticeID(n.BundleID, n.DequeuedAt.UnixMicro()))
	}
	for recipient, ids := range byRecipient {
		for chunk := range slices.Chunk(ids, maxBatchOps) {
			b := s.recipients.NewTransactionalBatch(azcosmos.NewPartitionKeyString(recipient))
			for _, id := range chunk {
				b.DeleteItem(id, nil)
			}
			err := s.execute(ctx, s.recipients, b)
			if !errors.Is(err, store.ErrConflict) {
				if err != nil {
					return err
				}
				continue
			}
			for _, id := range chunk {
				err := s.deleteItem(ctx, s.recipients, azcosmos.NewPartitionKeyString(recipient), id)
				if err != nil && !isStatus(err, http.StatusNotFound) {
					return err
				}
			}
		}
	}
	return nil
}
