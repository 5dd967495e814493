package pebble

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cockroachdb/pebble/v2"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
)

// BenchmarkDueRecipientsOf1000RecipientsRetaining500Bundles: a pass's
// question to the store (DueRecipients) when 1,000 recipients retain 500
// dequeued bundles each (500,000 in all, a week of a bundle every 20 minutes
// each) and none is due: what a sweep pass costs before it visits anyone.
func BenchmarkDueRecipientsOf1000RecipientsRetaining500Bundles(b *testing.B) {
	const recipients, perRecipient = 1000, 500
	s, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	batch := s.db.NewBatch()
	for range recipients {
		r := uuid.New()
		for i := range perRecipient {
			id := uuid.New()
			at := now.Add(-time.Duration(i+1) * 20 * time.Minute)
			rec := bundle.Record{ID: id.String(), Origin: domain.OriginTimeSeries, ContentType: "rsm-014", Group: domain.GroupTimeSeries,
				Start: int64(i * 10), End: int64(i*10 + 10), Count: 10, Weight: 10, DocumentTypes: []string{"rsm-014"},
				State: bundle.Dequeued, CreatedAt: at, DequeuedAt: at}
			v, err := json.Marshal(rec)
			if err != nil {
				b.Fatal(err)
			}
			if err := batch.Set(append(append([]byte{'x'}, r[:]...), id[:]...), v, nil); err != nil {
				b.Fatal(err)
			}
			// The index of retention times ('y'), for a store that keeps one.
			key := binary.BigEndian.AppendUint64([]byte{'y'}, uint64(at.UnixMicro()))
			if err := batch.Set(append(append(key, r[:]...), id[:]...), nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := batch.Commit(pebble.Sync); err != nil {
		b.Fatal(err)
	}
	dueBefore, since := now.Add(-7*24*time.Hour), now.Add(-time.Minute)
	b.ResetTimer()
	for range b.N {
		n := 0
		if err := s.DueRecipients(context.Background(), dueBefore, since, func(string) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
		if n != 0 {
			b.Fatalf("%d recipients due, want none", n)
		}
	}
}
