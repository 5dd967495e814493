package cosmos

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/store"
)

// Retention finds what is due through the index of da, the time a dequeued
// bundle's document was dequeued (unix microseconds; a kept drawers' record
// carries its last bundle's), which only those documents have: one cross-partition query of a range of the index loads
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

// MaxRetention is the longest Config.Retention: a dequeued bundle's ttl,
// the retention plus dequeuedTTLMargin, is an int32 of seconds, and Cosmos
// DB refuses a document whose ttl is not 1..2^31-1 or -1. Open refuses a
// longer one.
const MaxRetention = math.MaxInt32*time.Second - dequeuedTTLMargin

// dequeuedTTL is the ttl of a dequeued bundle's document, in seconds.
func dequeuedTTL(retention time.Duration) int32 {
	return int32((retention + dequeuedTTLMargin) / time.Second) //nolint:gosec // at most 2^31-1: Open takes no more than MaxRetention
}

// retentionQuery reads what a visit of retention decides on, in one query
// of the recipient's partition: its entries and cursors, the dequeued
// bundles and kept drawers' records in either range of the index of da
// (due, or new since the last pass).
// Retained bundles in between are not loaded: Cosmos DB serves both
// filters from the index (/t/? and the range index of /da/?) and charges
// the documents they load.
const (
	retentionQuery      = "SELECT * FROM c WHERE c.t IN ('entry', 'shelf', 'cursor') OR c.da < @due"
	retentionSinceQuery = retentionQuery + " OR c.da >= @since"
)

// loadRetention reads the recipient's retention state. It is not anchored
// on the primary: every sweep write is conditional on what it read, and a
// read behind the primary only sees less acknowledged and less due, so the
// sweep removes less, never more. An answer in several pages may show each
// at another moment (a cursor moved past positions its entry, read
// earlier, does not show): its entries and cursors are checked on the
// primary (checkRetentionPages), the cabinets of those that changed left
// out of the visit, and the pages a sweep deletes before its writes stop
// at the positions the entry shows (hub's pagesEnd). Its answer's token
// is kept (queryNoting), so that the visit's later reads are not further
// behind.
func (s *Store) loadRetention(ctx context.Context, recipient string, dueBefore, since time.Time) (store.RetentionState, error) {
	var st store.RetentionState
	query := retentionQuery
	params := []azcosmos.QueryParameter{{Name: "@due", Value: dueBefore.UnixMicro()}}
	if !since.IsZero() {
		query = retentionSinceQuery
		params = append(params, azcosmos.QueryParameter{Name: "@since", Value: since.UnixMicro()})
	}
	var newBytes int64 // of the bundles dequeued since
	var cat catalogDocs
	pages, err := s.queryNoting(ctx, recipient, query, params, func(raw []byte) error {
		var probe struct {
			T  string
			DA int64 `json:"da"`
		}
		if err := json.Unmarshal(raw, &probe); err != nil {
			return err
		}
		if probe.T == typeDequeued && !since.IsZero() && probe.DA >= since.UnixMicro() {
			newBytes += int64(len(raw)) + docOverhead
		}
		switch probe.T {
		case typeEntry, typeShelf:
			return cat.add(probe.T, raw)
		case typeCursor:
			return appendDecoded(&st.Cursors, raw, toCursor)
		case typeDequeued:
			return appendDecoded(&st.Bundles, raw, toBundle)
		case typeKept:
			if probe.DA < dueBefore.UnixMicro() { // else new since: not due yet
				return appendDecoded(&st.Kept, raw, toKept)
			}
		}
		return nil
	})
	st.Entries = cat.catalog()
	if err == nil && pages > 1 {
		err = s.checkRetentionPages(ctx, recipient, &st)
	}
	if err != nil || since.IsZero() {
		return st, err
	}
	return st, s.boundRetained(ctx, recipient, &st, dueBefore, since, newBytes)
}

// queryNoting is query in the recipient's partition of the recipients
// container that keeps its answers' session tokens: the visit's later reads
// (every retained bundle, the stored shelves) must see at least what it
// saw. They are sent with this process's tokens only, which need not hold
// other instances' dequeues, so a replica further behind could serve them:
// one that has not the dequeue of a bundle whose cursor the visit read
// moved would leave the bundle's drawers named by no retained bundle, and
// the sweep would free them while the bundle still reads from them. It
// returns the number of pages of the answer.
func (s *Store) queryNoting(ctx context.Context, recipient, sql string, params []azcosmos.QueryParameter, fn func([]byte) error) (int, error) {
	pager := s.recipients.NewQueryItemsPager(sql, azcosmos.NewPartitionKeyString(recipient),
		&azcosmos.QueryOptions{QueryParameters: params, SessionToken: s.tokens.get(containerRecipients)})
	pages := 0
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return pages, err
		}
		pages++
		if page.RawResponse != nil {
			s.tokens.note(containerRecipients, page.RawResponse.Header.Get("x-ms-session-token"))
		}
		for _, raw := range page.Items {
			if err := fn(raw); err != nil {
				return pages, err
			}
		}
	}
	return pages, nil
}

// checkRetentionPages reads on the primary, when the visit's query was
// answered in several pages, the entries and cursors it read, and leaves
// out of st the cabinets of those it does not find as read: this visit
// does not sweep them. Each page may show another moment, and the sweep
// deletes the pages of the drawers it frees before its conditional
// writes: an entry paired with a cursor of another moment may look
// acknowledged where it is not: a cursor read before another visit took
// its drained cabinet out, paired with the entry a save then starts afresh
// at position 0, makes the new notifications look acknowledged, and their
// pages would go
// (TestAVisitSpanningAnotherVisitAndARestartOfTheCabinetKeepsItsNewNotifications).
// Every one was read before any is checked, so those found unchanged are
// as they were when the query ended: later changes only append,
// acknowledge more or take a cabinet out whole. Only the cabinets that
// changed are left out, so that a busy one does not hold up the others.
func (s *Store) checkRetentionPages(ctx context.Context, recipient string, st *store.RetentionState) error {
	var ids []string
	add := func(id string) { // once: a load across a cabinet's restart may hold its entry twice
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	for _, e := range st.Entries {
		add(entryID(e.Key()))
	}
	for _, c := range st.Cursors {
		add(cursorID(c.Key()))
	}
	now := map[string]string{} // id → etag on the primary
	err := s.readManyOnPrimary(ctx, s.recipients, recipient, ids, func(raw []byte) error {
		var d struct {
			ID   string `json:"id"`
			ETag string `json:"_etag"`
		}
		err := json.Unmarshal(raw, &d)
		now[d.ID] = d.ETag
		return err
	})
	if err != nil {
		return err
	}
	changed := map[catalog.Key]bool{}
	for _, e := range st.Entries {
		if now[entryID(e.Key())] != e.Version {
			changed[e.Key()] = true
		}
	}
	for _, c := range st.Cursors {
		if now[cursorID(c.Key())] != c.Version {
			changed[c.Key()] = true
		}
	}
	st.Entries = slices.DeleteFunc(st.Entries, func(e catalog.Entry) bool { return changed[e.Key()] })
	st.Cursors = slices.DeleteFunc(st.Cursors, func(c catalog.Cursor) bool { return changed[c.Key()] })
	return nil
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

// A logical partition holds at most 20 GB, data and index together
// (https://learn.microsoft.com/azure/cosmos-db/concepts-limits), and a
// recipient's dequeued bundles are retained in its own. Dequeued one by
// one at the highest rate the partition serves, they would fill it within
// days (docs/cosmos.md, "Sizing"), so a recipient's retained bundles are
// bounded by bytes: half the partition, the other half for its catalog,
// pending bundles, notices and index. Visiting a recipient that dequeued
// since the last pass, retention measures the bytes dequeued since; when
// that rate kept for the whole retention would pass the bound, the
// recipient's retention is shortened to what the bound holds at that rate,
// and the bundles (and kept drawers) dequeued before the shortened cutoff
// are due now, oldest first, at most maxTrim a visit.
const (
	defaultRetainedBudget = 10 << 30
	// docOverhead is what a document costs beyond its JSON: the system
	// properties (_rid, _self, _etag, _attachments, _ts) and its index
	// terms.
	docOverhead = 250
	maxTrim     = 10_000
)

// boundRetained shortens the recipient's retention when its dequeues since
// since, kept for the retention, would outgrow the budget: st.DueBefore
// becomes the shortened cutoff, and the bundles and kept drawers dequeued
// between dueBefore and it join st's.
func (s *Store) boundRetained(ctx context.Context, recipient string, st *store.RetentionState, dueBefore, since time.Time, newBytes int64) error {
	budget := s.retainedBudget
	if budget <= 0 {
		budget = defaultRetainedBudget
	}
	now := s.cfg.Now()
	window := now.Sub(since)
	if newBytes == 0 || window <= 0 {
		return nil
	}
	retention := now.Sub(dueBefore)
	if float64(newBytes)*retention.Seconds()/window.Seconds() <= float64(budget) {
		return nil
	}
	kept := time.Duration(float64(window) * float64(budget) / float64(newBytes))
	cutoff := now.Add(-kept)
	if !cutoff.After(dueBefore) {
		return nil
	}
	const trimQuery = "SELECT TOP @n * FROM c WHERE c.da >= @due AND c.da < @cutoff ORDER BY c.da"
	params := []azcosmos.QueryParameter{
		{Name: "@n", Value: maxTrim}, {Name: "@due", Value: dueBefore.UnixMicro()}, {Name: "@cutoff", Value: cutoff.UnixMicro()},
	}
	n := 0
	last := dueBefore.UnixMicro()
	err := s.query(ctx, s.recipients, recipient, trimQuery, params, func(raw []byte) error {
		n++
		var probe struct {
			T  string
			DA int64 `json:"da"`
		}
		if err := json.Unmarshal(raw, &probe); err != nil {
			return err
		}
		last = probe.DA
		switch probe.T {
		case typeDequeued:
			if probe.DA >= since.UnixMicro() {
				// New since the last pass: the visit's query read it
				// already (the cutoff is past since when more than the
				// budget was dequeued since), and a bundle listed twice
				// is deleted twice, which fails the catalog batch.
				return nil
			}
			return appendDecoded(&st.Bundles, raw, toBundle)
		case typeKept:
			return appendDecoded(&st.Kept, raw, toKept)
		}
		return nil
	})
	if err != nil {
		return err
	}
	st.DueBefore = cutoff
	if n >= maxTrim {
		// The rest go at the next visit: no further than the last read
		// (those dequeued at that very moment wait with them).
		st.DueBefore = time.UnixMicro(last)
	}
	s.cfg.Logger.Warn("a recipient's retained bundles would outgrow its partition: its retention is shortened",
		"recipient", recipient, "retention", kept.Round(time.Second), "due", n)
	return nil
}

func toKept(d keptDoc) store.Kept {
	return store.Kept{ID: d.ID, Until: time.UnixMicro(d.Until), Drawers: d.Drawers}
}

// bundlesAsRead checks that the bundles' records are stored at the etags a
// visit read. It reads them on the primary (batches of reads, one per
// hundred records): a replica behind another instance's sweep would still
// show a record that sweep deleted, while a later bundle took its id and
// its document.
func (s *Store) bundlesAsRead(ctx context.Context, recipient string, bundles []bundle.Record) error {
	ids := make([]string, 0, len(bundles))
	read := make(map[string]string, len(bundles)) // document id → etag read
	for _, b := range bundles {
		id := bundleDocID(b.ID)
		if _, twice := read[id]; !twice {
			ids = append(ids, id)
		}
		read[id] = b.Version
	}
	found := 0
	err := s.readManyOnPrimary(ctx, s.recipients, recipient, ids, func(raw []byte) error {
		var d struct {
			ID   string `json:"id"`
			ETag string `json:"_etag"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		if d.ETag != read[d.ID] {
			return fmt.Errorf("%w: %s changed since retention read it", store.ErrConflict, d.ID)
		}
		found++
		return nil
	})
	if err == nil && found < len(ids) {
		err = fmt.Errorf("%w: a bundle retention read is gone", store.ErrConflict)
	}
	return err
}

// BundlesAsRead is bundlesAsRead, its errors mapped.
func (s *Store) BundlesAsRead(ctx context.Context, recipient string, bundles []bundle.Record) error {
	return storeError(s.bundlesAsRead(ctx, recipient, bundles))
}
