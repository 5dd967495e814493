package embedded

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/repository"
)

// errEnough ends a scan that has found what it needs.
var errEnough = errors.New("enough")

// Notices returns up to limit notices, oldest first: a scan of their own
// prefix, which holds only notices not yet delivered.
func (s *Store) Notices(_ context.Context, limit int) ([]repository.Notice, error) {
	var out []repository.Notice
	err := s.scan([]byte{prefixNotice}, func(key, _ []byte) error {
		if len(out) == limit {
			return errEnough
		}
		n, err := parseNotice(key)
		if err != nil {
			return err
		}
		out = append(out, n)
		return nil
	})
	if errors.Is(err, errEnough) {
		err = nil
	}
	return out, err
}

// NoticeBacklog counts the notices and says when the oldest was made.
func (s *Store) NoticeBacklog(_ context.Context) (int, time.Time, error) {
	var n int
	var oldest time.Time
	err := s.scan([]byte{prefixNotice}, func(key, _ []byte) error {
		if n == 0 {
			first, err := parseNotice(key)
			if err != nil {
				return err
			}
			oldest = first.DequeuedAt
		}
		n++
		return nil
	})
	return n, oldest, err
}

// RemoveNotices deletes delivered notices.
func (s *Store) RemoveNotices(ctx context.Context, notices []repository.Notice) error {
	puts := make([]put, 0, len(notices))
	for _, n := range notices {
		r, id, err := parseIDs(n.Recipient, n.BundleID)
		if err != nil {
			return err
		}
		puts = append(puts, put{key: noticeKey(n.DequeuedAt.UnixNano(), r, id), del: true})
	}
	return s.write(ctx, func(tx *txn) error {
		tx.apply(puts)
		return nil
	})
}

func parseNotice(key []byte) (repository.Notice, error) {
	if len(key) != 1+8+16+16 {
		return repository.Notice{}, errors.New("embedded: a notice key of the wrong length")
	}
	at := int64(binary.BigEndian.Uint64(key[1:9])) //nolint:gosec // written from a time after 1970
	return repository.Notice{
		DequeuedAt: time.Unix(0, at),
		Recipient:  uuidString(key[9:25]),
		BundleID:   uuidString(key[25:41]),
	}, nil
}

// DequeuedBundle reads one dequeued bundle's record: a key get.
func (s *Store) DequeuedBundle(_ context.Context, recipient, bundleID string) (bundle.Record, error) {
	r, id, err := parseIDs(recipient, bundleID)
	if err != nil {
		return bundle.Record{}, err
	}
	v, ok, err := s.get(dequeuedKey(r, id))
	if err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%w: no dequeued bundle %s", domain.ErrNotFound, bundleID)
		}
		return bundle.Record{}, err
	}
	var rec bundle.Record
	err = json.Unmarshal(v, &rec)
	return rec, err
}

var _ repository.Announcer = (*Store)(nil)
