package cosmos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/zeebo/xxh3"
	"golang.org/x/sync/errgroup"
)

// The id index's layout: an id is kept in the bucket (partition) that its
// hash modulo the bucket count names. The count is recorded in the settings
// document; changing it is a migration that keeps every id findable:
//
//  1. For bothFor after it begins, saves write their ids in both layouts
//     and every lookup reads both. An instance that has not read the
//     settings since the migration began still writes the old layout,
//     where everyone looks, and reads it, where everyone writes.
//  2. Then saves write the new layout only (every instance has read the
//     settings by then: a save re-reads them when they are older than
//     settingsRefresh), and lookups still read both.
//  3. Once the old layout's buckets hold no document (retention removes
//     them as their notifications are dequeued and kept for the retention
//     period), the settings record the new count alone.
//
// A bucket's partition key names its layout ("h<count>-<n>"), so a save's
// documents in the two layouts never share a partition and id.

// bucketPrefix starts every id partition key.
const bucketPrefix = "h"

// The migration's timing. bothFor is far longer than settingsRefresh plus
// a save's lease: a save whose settings were read just before the
// migration began has ended long before anyone stops writing the old
// layout. emptyCheckEvery spaces the looks at the old buckets (a query of
// one document per bucket).
const (
	settingsRefresh = time.Minute
	bothFor         = 15 * time.Minute
	emptyCheckEvery = time.Hour
)

// idLayout says which bucket counts a save writes its ids in and a lookup
// reads.
type idLayout struct {
	write, read []int
}

// bucket is the partition of id in a layout of count buckets.
func bucket(count int, id string) string {
	n := xxh3.HashString(id) % uint64(count)
	return bucketPrefix + strconv.Itoa(count) + "-" + strconv.FormatUint(n, 10)
}

// buckets lists every partition of a layout of count buckets.
func buckets(count int) []string {
	out := make([]string, count)
	for n := range count {
		out[n] = bucketPrefix + strconv.Itoa(count) + "-" + strconv.Itoa(n)
	}
	return out
}

// layoutAt is the layout the settings prescribe at now.
func (d settingsDoc) layoutAt(now time.Time) idLayout {
	if d.NextIDBuckets == 0 {
		return idLayout{write: []int{d.IDBuckets}, read: []int{d.IDBuckets}}
	}
	read := []int{d.IDBuckets, d.NextIDBuckets}
	if now.Before(time.UnixMilli(d.IDMigrationSince).Add(bothFor)) {
		return idLayout{write: read, read: read}
	}
	return idLayout{write: []int{d.NextIDBuckets}, read: read}
}

// idSettings is the store's copy of the settings document and when it was
// read.
type idSettings struct {
	mu     sync.Mutex
	doc    settingsDoc
	readAt time.Time
	// checkedAt: the last look at whether the old layout is empty;
	// checking: one is under way.
	checkedAt time.Time
	checking  atomic.Bool
}

// layout returns the id layout to use now, re-reading the settings (on the
// primary) when the copy is older than settingsRefresh. The read is made
// without the lock: one whose answer never comes holds up its own caller,
// until that caller's deadline, not every save of the instance behind it.
// Callers that find the copy old at once each read; the copy keeps the
// read that began last, so a slow answer never replaces a newer one.
func (s *Store) layout(ctx context.Context) (idLayout, error) {
	st := &s.idSettings
	now := s.cfg.Now()
	st.mu.Lock()
	stale := now.Sub(st.readAt) >= settingsRefresh
	st.mu.Unlock()
	if stale {
		d, found, err := s.readSettings(ctx)
		if err != nil {
			return idLayout{}, fmt.Errorf("cosmos: settings: %w", err)
		}
		if !found {
			return idLayout{}, fmt.Errorf("cosmos: database %s: its settings document is gone", s.cfg.Database)
		}
		st.mu.Lock()
		if now.After(st.readAt) {
			if d.IDBuckets != st.doc.IDBuckets || d.NextIDBuckets != st.doc.NextIDBuckets {
				s.cfg.Logger.Info("cosmos id index layout changed",
					"buckets", d.IDBuckets, "migrating_to", d.NextIDBuckets)
			}
			st.doc, st.readAt = d, now
		}
		st.mu.Unlock()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	l := st.doc.layoutAt(now)
	if len(l.write) == 1 && len(l.read) == 2 && now.Sub(st.checkedAt) >= emptyCheckEvery && st.checking.CompareAndSwap(false, true) {
		st.checkedAt = now
		go s.finishMigration(context.WithoutCancel(ctx), st.doc)
	}
	return l, nil
}

// finishMigration records the new bucket count alone once the old layout's
// buckets hold no document. It runs beside the save that started it (ctx:
// that save's, without its end), at low priority.
func (s *Store) finishMigration(ctx context.Context, d settingsDoc) {
	defer s.idSettings.checking.Store(false)
	if d.ETag == "" {
		return // not read from the database: the next refresh reads it
	}
	ctx, cancel := context.WithTimeout(s.LowPriority(ctx), time.Minute)
	defer cancel()
	empty, err := s.bucketsEmpty(ctx, d.IDBuckets)
	if err != nil || !empty {
		if err != nil {
			s.cfg.Logger.Warn("cosmos id index migration: cannot tell whether the old buckets are empty", "error", err)
		}
		return
	}
	done := d
	done.IDBuckets, done.NextIDBuckets, done.IDMigrationSince, done.ETag = d.NextIDBuckets, 0, 0, ""
	_, err = s.recipients.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(settingsPartition), settingsID, mustJSON(done),
		&azcosmos.ItemOptions{IfMatchEtag: etag(d.ETag)})
	switch {
	case err == nil:
		s.cfg.Logger.Info("cosmos id index migration finished", "buckets", done.IDBuckets)
	case isStatus(err, http.StatusPreconditionFailed):
		// Another instance finished it (or changed the settings): the next
		// refresh reads what it wrote.
	default:
		s.cfg.Logger.Warn("cosmos id index migration: cannot record its end", "error", err)
	}
	st := &s.idSettings
	st.mu.Lock()
	st.readAt = time.Time{}
	st.mu.Unlock()
}

// bucketsEmpty says whether no bucket of a layout of count holds a
// document of a save that counts: committed, or still in flight. A
// document of an aborted save (or one without a record: an aborted save's,
// or a pending one's, expires the retention period after the save began,
// long after its lease) is deleted on the way: its ids count for no
// lookup, and nothing else ever removes it when its create arrived after
// the save's rollback deleted its documents, or the rollback's delete
// failed (the save's reservation and pages, through which a rollback or
// retention finds its id documents, are gone). Each bucket is read until
// the first document that counts: a query, and a point read of a commit
// record per document met.
//
// Each bucket's query carries the token its primary answers now
// (primaryToken): a replica that lags behind the ids written there may
// miss them and answer that the bucket is empty, and the migration would
// end with ids the lookups no longer read (saved again instead of found
// as duplicates). The ids of the old layout were written by any instance,
// most of them before the migration began, so no token this instance
// holds covers them.
func (s *Store) bucketsEmpty(ctx context.Context, count int) (bool, error) {
	var held atomic.Bool
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, b := range buckets(count) {
		g.Go(func() error {
			token, err := s.primaryToken(ctx, s.ids, b)
			if err != nil {
				return err
			}
			pager := s.ids.NewQueryItemsPager("SELECT c.id, c.s, c.st FROM c", azcosmos.NewPartitionKeyString(b),
				&azcosmos.QueryOptions{PageSizeHint: 1, SessionToken: &token})
			for pager.More() && !held.Load() {
				page, err := pager.NextPage(ctx)
				if err != nil {
					return err
				}
				for _, raw := range page.Items {
					counts, err := s.idDocCounts(ctx, b, raw)
					if err != nil {
						return err
					}
					if counts {
						held.Store(true)
						return nil
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return false, err
	}
	return !held.Load(), nil
}

// idDocCounts says whether the id document raw of bucket belongs to a
// committed or pending save, and deletes it when not.
func (s *Store) idDocCounts(ctx context.Context, bucket string, raw []byte) (bool, error) {
	var d idDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return true, err
	}
	state, err := s.saveState(ctx, d.Save, d.Token)
	if err != nil || state != stateAborted {
		return true, err
	}
	err = s.deleteItem(ctx, s.ids, azcosmos.NewPartitionKeyString(bucket), d.ID)
	if err != nil && !isStatus(err, http.StatusNotFound) {
		return true, err
	}
	s.cfg.Logger.Info("cosmos id index migration: deleted an id document of an aborted save", "bucket", bucket, "save", d.Save)
	return false, nil
}
