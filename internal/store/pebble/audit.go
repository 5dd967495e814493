package pebble

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/energydatahub/messagehub/internal/audit"
)

// The audit log has a key range of its own, ordered by recipient and then
// by event key (which starts with the event's time):
//
//	a <recipient> <event key>   one event (auditRecord, JSON)
//
// A page of a recipient's events is one range scan; retention removes what
// is older with one range deletion per recipient that has any.
const prefixAudit = 'a'

func auditPrefix(r [16]byte) []byte { return append([]byte{prefixAudit}, r[:]...) }

func auditKey(r [16]byte, key string) []byte { return append(auditPrefix(r), key...) }

// auditRecord is an event as stored; the recipient and key are its key's.
type auditRecord struct {
	At      int64  `json:"at"` // unix ms
	Action  int32  `json:"a"`
	Subject string `json:"s,omitempty"`
	Bundle  string `json:"b,omitempty"`
	Detail  string `json:"d,omitempty"`
}

// AppendAudit writes the events in one durable write, through the writer
// like every other write.
func (s *Store) AppendAudit(ctx context.Context, events []audit.Event) error {
	puts := make([]put, 0, len(events))
	for _, e := range events {
		r, err := uuidBytes(e.Recipient)
		if err != nil {
			return err
		}
		if _, err := audit.ParseKey(e.Key); err != nil {
			return err
		}
		p, err := setPut(auditKey(r, e.Key), auditRecord{At: e.At.UnixMilli(), Action: int32(e.Action), Subject: e.Subject, Bundle: e.BundleID, Detail: e.Detail})
		if err != nil {
			return err
		}
		puts = append(puts, p)
	}
	if len(puts) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *txn) error {
		tx.apply(puts)
		return nil
	})
}

// AuditEvents scans the recipient's range from after q.After to before
// q.Before, reading one event more than the page to know whether more are
// left. It answers once what it read is durable: pebble shows a write
// before its fsync, and an operator must not be shown an event a failed
// fsync or a power loss removes.
func (s *Store) AuditEvents(ctx context.Context, q audit.Query) (audit.Page, error) {
	r, err := uuidBytes(q.Recipient)
	if err != nil {
		return audit.Page{}, err
	}
	prefix := auditPrefix(r)
	// The first key after q.After: keys of one recipient differ after it.
	lo := append(auditKey(r, q.After), 0)
	hi := prefixEnd(prefix)
	if q.Before != "" {
		hi = auditKey(r, q.Before)
	}
	if bytes.Compare(lo, hi) >= 0 {
		return audit.Page{}, nil
	}
	limit := max(q.Limit, 1)
	var page audit.Page
	err = s.scanRange(lo, hi, func(key, value []byte) error {
		if len(page.Events) == limit {
			page.Next = page.Events[limit-1].Key
			return errEnough
		}
		var rec auditRecord
		if err := json.Unmarshal(value, &rec); err != nil {
			return fmt.Errorf("audit event %x: %w", key, err)
		}
		page.Events = append(page.Events, audit.Event{
			Key: string(key[len(prefix):]), At: time.UnixMilli(rec.At), Action: audit.Action(rec.Action),
			Subject: rec.Subject, Recipient: q.Recipient, BundleID: rec.Bundle, Detail: rec.Detail,
		})
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return audit.Page{}, err
	}
	if err := s.durability.settled(ctx); err != nil {
		return audit.Page{}, err
	}
	return page, nil
}

// PruneAudit deletes every event before the time: for each recipient whose
// first event is older, one range deletion of its events up to then, all in
// one synced batch. A recipient with nothing to remove costs one seek.
func (s *Store) PruneAudit(_ context.Context, before time.Time) error {
	if s.readOnly {
		return s.refusal
	}
	bound := audit.TimeBound(before)
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixAudit}, UpperBound: []byte{prefixAudit + 1}})
	if err != nil {
		return err
	}
	batch := s.db.NewBatch()
	defer func() { _ = batch.Close() }()
	for valid := iter.First(); valid; {
		key := iter.Key()
		if len(key) < 1+16 {
			valid = iter.Next()
			continue
		}
		r := [16]byte(key[1:17])
		if string(key[17:]) < bound {
			if err := batch.DeleteRange(auditPrefix(r), auditKey(r, bound), nil); err != nil {
				_ = iter.Close()
				return err
			}
		}
		valid = iter.SeekGE(prefixEnd(auditPrefix(r)))
	}
	if err := iter.Close(); err != nil {
		return err
	}
	if batch.Empty() {
		return nil
	}
	return s.db.Apply(batch, pebble.Sync)
}
