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
// oldest first. The domains' notices make one round, in the order of
// their dequeue times (then their keys): a call that cannot list every
// notice goes on, at the next call for the same domains, after the last
// one it listed, wrapping round to the oldest at the end. However many
// notices a caller keeps skipping (those whose bundle cannot be read), of
// whichever domain, the ones after them come up in turn. Pebble shows a
// dequeue's write group before it is synced, so a notice whose bundle the
// published records still show pending is left out: its dequeue is not
// durable yet.
func (s *Store) Notices(ctx context.Context, origins []domain.Origin, limit int) ([]store.Notice, error) {
	if limit <= 0 {
		return nil, nil
	}
	origins = slices.Clone(origins)
	slices.Sort(origins)
	origins = slices.Compact(origins) // a domain named twice is listed once
	set := string(noticeSet(origins))
	// Those after where the last call stopped, then from the oldest up to
	// the last one listed, which may still wait.
	after := s.noticesAt.at(set)
	list, err := s.listRound(ctx, origins, after, nil, limit)
	if err == nil && len(list) < limit && after != nil {
		var wrapped []listedNotice
		wrapped, err = s.listRound(ctx, origins, nil, after, limit-len(list))
		list = append(list, wrapped...)
	}
	if err != nil {
		return nil, err
	}
	if len(list) < limit {
		s.noticesAt.set(set, nil) // all listed: the next call starts at the oldest
	} else {
		s.noticesAt.set(set, list[len(list)-1].place)
	}
	out := make([]store.Notice, len(list))
	for i, n := range list {
		out[i] = n.Notice
	}
	slices.SortStableFunc(out, func(a, b store.Notice) int { return a.DequeuedAt.Compare(b.DequeuedAt) })
	return out, nil
}

// noticeSet names a sorted list of domains.
func noticeSet(origins []domain.Origin) []byte {
	b := make([]byte, len(origins))
	for i, o := range origins {
		b[i] = byte(o)
	}
	return b
}

// A notice's place in the round of several domains' notices is its key
// after the domain (dequeue time, recipient, bundle), then the domain: the
// order of dequeue times across the domains.
func noticePlace(key []byte) []byte {
	return append(slices.Clone(key[2:]), key[1])
}

// listedNotice is a notice and its place in the round.
type listedNotice struct {
	store.Notice
	place []byte
}

// listRound returns, in the order of the round, up to limit durable
// notices of the domains whose place is after lo (nil: from the first) and
// at most hi (nil: to the last). It lists up to limit of each domain in
// that range: the round's first limit are among them.
func (s *Store) listRound(ctx context.Context, origins []domain.Origin, lo, hi []byte, limit int) ([]listedNotice, error) {
	var all []listedNotice
	for _, o := range origins {
		prefix := noticePrefix(o)
		from, to := prefix, prefixEnd(prefix)
		if lo != nil {
			from = append(slices.Clone(prefix), lo[:len(lo)-1]...)
		}
		if hi != nil {
			to = append(append(slices.Clone(prefix), hi[:len(hi)-1]...), 0)
		}
		list, err := s.listNotices(ctx, from, to, limit, func(place []byte) bool {
			return (lo == nil || bytes.Compare(place, lo) > 0) && (hi == nil || bytes.Compare(place, hi) <= 0)
		})
		if err != nil {
			return nil, err
		}
		all = append(all, list...)
	}
	slices.SortFunc(all, func(a, b listedNotice) int { return bytes.Compare(a.place, b.place) })
	return all[:min(len(all), limit)], nil
}

// listNotices returns up to limit durable notices of the keys from lo and
// before hi whose place in the round is in, in order.
func (s *Store) listNotices(ctx context.Context, lo, hi []byte, limit int, in func(place []byte) bool) ([]listedNotice, error) {
	var out []listedNotice
	err := s.scanRange(lo, hi, func(key, _ []byte) error {
		if len(out) == limit {
			return errEnough
		}
		notice, err := parseNotice(key)
		if err != nil {
			return err
		}
		place := noticePlace(key)
		if !in(place) {
			return nil
		}
		if pending, err := s.pendingNow(ctx, notice.Recipient, notice.BundleID); err != nil || pending {
			return err
		}
		out = append(out, listedNotice{Notice: notice, place: place})
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, err
	}
	return out, nil
}

// noticeResume keeps, per list of domains (noticeSet), the place of the
// last notice the last Notices call for them listed when it could not
// list them all; nil: from the oldest. Each list has a round of its own,
// so callers that ask for different domains (the notifier's workers, one
// per domain) do not move each other on.
type noticeResume struct {
	mu    sync.Mutex
	after map[string][]byte
}

func (r *noticeResume) at(set string) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.after[set]
}

func (r *noticeResume) set(set string, place []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.after == nil {
		r.after = map[string][]byte{}
	}
	r.after[set] = place
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
