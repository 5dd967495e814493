package pebble

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// errEnough ends a scan that has found what it needs.
var errEnough = errors.New("enough")

// Notices returns up to limit notices of the domains, oldest first: a scan
// of each domain's own prefix, which holds only its notices not yet
// delivered. Pebble shows a dequeue's write group before it is synced, so
// a notice whose bundle the published records still show pending is left
// out: its dequeue is not durable yet.
func (s *Store) Notices(ctx context.Context, origins []domain.Origin, limit int) ([]store.Notice, error) {
	var out []store.Notice
	for _, o := range origins {
		n := 0
		err := s.scan(noticePrefix(o), func(key, _ []byte) error {
			if n == limit {
				return errEnough
			}
			notice, err := parseNotice(key)
			if err != nil {
				return err
			}
			if pending, err := s.pendingNow(ctx, notice.Recipient, notice.BundleID); err != nil || pending {
				return err
			}
			out = append(out, notice)
			n++
			return nil
		})
		if err != nil && !errors.Is(err, errEnough) {
			return nil, err
		}
	}
	slices.SortStableFunc(out, func(a, b store.Notice) int { return a.DequeuedAt.Compare(b.DequeuedAt) })
	return out[:min(len(out), limit)], nil
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
