package pebble

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// errEnough ends a scan that has found what it needs.
var errEnough = errors.New("enough")

// Notices returns up to limit notices of the domains: a scan of each
// domain's own prefix, which holds only its notices not yet delivered,
// oldest first. A call that cannot list every notice goes on, at the next
// call, after the last one it listed of each domain, wrapping round to the
// oldest at the end: however many notices a caller keeps skipping (those
// whose bundle cannot be read), the ones after them come up in turn. Pebble
// shows a dequeue's write group before it is synced, so a notice whose
// bundle the published records still show pending is left out: its
// dequeue is not durable yet.
func (s *Store) Notices(ctx context.Context, origins []domain.Origin, limit int) ([]store.Notice, error) {
	if limit <= 0 {
		return nil, nil
	}
	// Each domain's notices in the order of its scan, up to limit: those
	// after where its last call stopped, then from the oldest.
	lists := make([][]listedNotice, len(origins))
	for i, o := range origins {
		prefix := noticePrefix(o)
		after := s.noticesAt.at(o)
		from := prefix
		if after != nil {
			from = after
		}
		list, err := s.listNotices(ctx, from, prefixEnd(prefix), limit)
		if err == nil && len(list) < limit && after != nil {
			// From the oldest up to the last one listed, which may still wait.
			var wrapped []listedNotice
			wrapped, err = s.listNotices(ctx, prefix, append(slices.Clone(after), 0), limit-len(list))
			for i := range wrapped {
				wrapped[i].wrapped = true
			}
			list = append(list, wrapped...)
		}
		if err != nil {
			return nil, err
		}
		lists[i] = list
	}
	// The first of the domains' heads, so each domain's share is the start
	// of its scan and its next call goes on after that: a head not wrapped
	// round before one that is, then the oldest. A domain whose scan
	// wrapped round to its oldest notices gives way to the notices another
	// has not listed in this turn yet, however much newer: by age alone it
	// would fill every call while it holds as many as a call lists.
	out := make([]store.Notice, 0, limit)
	taken := make([]int, len(lists))
	for len(out) < limit {
		best := -1
		for i, list := range lists {
			if taken[i] < len(list) && (best < 0 || list[taken[i]].before(lists[best][taken[best]])) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		out = append(out, lists[best][taken[best]].Notice)
		taken[best]++
	}
	every := len(out) < limit
	for i, o := range origins {
		switch {
		case every:
			s.noticesAt.set(o, nil) // all listed: the next call starts at the oldest
		case taken[i] > 0:
			s.noticesAt.set(o, lists[i][taken[i]-1].key)
		}
	}
	slices.SortStableFunc(out, func(a, b store.Notice) int { return a.DequeuedAt.Compare(b.DequeuedAt) })
	return out, nil
}

// listedNotice is a notice and its key; wrapped: listed after its
// domain's scan wrapped round to the oldest.
type listedNotice struct {
	store.Notice
	key     []byte
	wrapped bool
}

// before says whether n goes before o in a call's share: not wrapped
// round before wrapped, then the older.
func (n listedNotice) before(o listedNotice) bool {
	if n.wrapped != o.wrapped {
		return !n.wrapped
	}
	return n.DequeuedAt.Before(o.DequeuedAt)
}

// listNotices returns up to limit durable notices of the keys after lo (lo
// itself left out unless it is a prefix, which no notice key is) and
// before hi, in order.
func (s *Store) listNotices(ctx context.Context, lo, hi []byte, limit int) ([]listedNotice, error) {
	var out []listedNotice
	err := s.scanRange(lo, hi, func(key, _ []byte) error {
		if len(out) == limit {
			return errEnough
		}
		if bytes.Equal(key, lo) {
			return nil
		}
		notice, err := parseNotice(key)
		if err != nil {
			return err
		}
		if pending, err := s.pendingNow(ctx, notice.Recipient, notice.BundleID); err != nil || pending {
			return err
		}
		out = append(out, listedNotice{Notice: notice, key: slices.Clone(key)})
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, err
	}
	return out, nil
}

// noticeResume keeps, per domain, the key of the last notice the last
// Notices call listed when it could not list them all; nil: from the
// oldest.
type noticeResume struct {
	mu    sync.Mutex
	after map[domain.Origin][]byte
}

func (r *noticeResume) at(o domain.Origin) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.after[o]
}

func (r *noticeResume) set(o domain.Origin, key []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.after == nil {
		r.after = map[domain.Origin][]byte{}
	}
	r.after[o] = key
}

// pendingNow says whether the published records show the recipient's
// bundle pending.
func (s *Store) pendingNow(ctx context.Context, recipient, bundleID string) (bool, error) {
	r, err := uuidBytes(recipient)
	if err != nil {
		return false, err
	}
	if rec := s.cached(r); rec != nil {
		_, ok := rec.pending[bundleID]
		return ok, nil
	}
	st, err := s.LoadRecipient(ctx, recipient)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(st.Pending, func(b bundle.Record) bool { return b.ID == bundleID }), nil
}

// NoticeBacklog counts the notices and says when the oldest was made.
func (s *Store) NoticeBacklog(_ context.Context) (int, time.Time, error) {
	var n int
	var oldest time.Time
	err := s.scan([]byte{prefixNotice}, func(key, _ []byte) error {
		notice, err := parseNotice(key)
		if err != nil {
			return err
		}
		if n == 0 || notice.DequeuedAt.Before(oldest) {
			oldest = notice.DequeuedAt
		}
		n++
		return nil
	})
	if err != nil {
		return 0, time.Time{}, err
	}
	return n, oldest, nil
}

// RemoveNotices deletes delivered notices.
func (s *Store) RemoveNotices(ctx context.Context, notices []store.Notice) error {
	puts := make([]put, 0, len(notices))
	for _, n := range notices {
		r, id, err := parseIDs(n.Recipient, n.BundleID)
		if err != nil {
			return err
		}
		puts = append(puts, put{key: noticeKey(n.Origin, n.DequeuedAt.UnixNano(), r, id), del: true})
	}
	return s.write(ctx, func(tx *txn) error {
		tx.apply(puts)
		return nil
	})
}

// parseNotice reads a notice's key.
func parseNotice(key []byte) (store.Notice, error) {
	var n store.Notice
	if len(key) != 2+8+16+16 || key[0] != prefixNotice {
		return n, errors.New("embedded: a notice key of the wrong length")
	}
	n.Origin, key = domain.Origin(key[1]), key[2:]
	n.DequeuedAt = time.Unix(0, int64(binary.BigEndian.Uint64(key[:8]))) //nolint:gosec // written from a time after 1970
	n.Recipient = uuidString(key[8:24])
	n.BundleID = uuidString(key[24:40])
	return n, nil
}

// DequeuedBundle reads one dequeued bundle's record: a key get. A released
// bundle's record, kept in the same place, is not found.
func (s *Store) DequeuedBundle(_ context.Context, recipient, bundleID string) (bundle.Record, error) {
	r, id, err := parseIDs(recipient, bundleID)
	if err != nil {
		return bundle.Record{}, err
	}
	rec, ok, err := s.dequeuedRecord(r, id)
	if err != nil || !ok {
		return bundle.Record{}, cmp.Or(err, fmt.Errorf("%w: no dequeued bundle %s", domain.ErrNotFound, bundleID))
	}
	if rec.State != bundle.Dequeued {
		return bundle.Record{}, fmt.Errorf("%w: bundle %s was released, not dequeued", domain.ErrNotFound, bundleID)
	}
	return rec, nil
}

// dequeuedRecord reads the record of a dequeued or released bundle of
// recipient r: found is false when there is none.
func (s *Store) dequeuedRecord(r, id [16]byte) (rec bundle.Record, found bool, err error) {
	v, found, err := s.get(dequeuedKey(r, id))
	if err != nil || !found {
		return bundle.Record{}, false, err
	}
	if err := json.Unmarshal(v, &rec); err != nil {
		return bundle.Record{}, false, err
	}
	return rec, true, nil
}
