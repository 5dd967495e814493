package pebble

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// Notices are read by domain, oldest first, a domain left out not at all,
// and counted and removed whatever their domain.
func TestNoticesAreReadByDomain(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	at := time.Unix(1_700_000_000, 0)
	var all []store.Notice
	var puts []put
	for i, o := range []domain.Origin{domain.OriginCharges, domain.OriginTimeSeries, domain.OriginAggregations, domain.OriginCharges, domain.OriginTimeSeries} {
		n := store.Notice{Recipient: uuid.NewString(), BundleID: uuid.NewString(), Origin: o, DequeuedAt: at.Add(time.Duration(5-i) * time.Second)}
		r, id, err := parseIDs(n.Recipient, n.BundleID)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, n)
		puts = append(puts, put{key: noticeKey(n.Origin, n.DequeuedAt.UnixNano(), r, id), value: []byte{}})
	}
	if err := s.write(ctx, func(tx *txn) error { tx.apply(puts); return nil }); err != nil {
		t.Fatal(err)
	}
	check := func(origins []domain.Origin, limit int, want ...int) {
		t.Helper()
		got, err := s.Notices(ctx, origins, limit)
		if err != nil || len(got) != len(want) {
			t.Fatalf("notices of %v: %+v (%v); want %d", origins, got, err, len(want))
		}
		for i, w := range want {
			if got[i] != all[w] {
				t.Fatalf("notices of %v: #%d is %+v, want %+v", origins, i, got[i], all[w])
			}
		}
	}
	check([]domain.Origin{domain.OriginCharges}, 10, 3, 0)
	check([]domain.Origin{domain.OriginTimeSeries, domain.OriginAggregations}, 10, 4, 2, 1)
	check(domain.Origins, 3, 4, 3, 2)
	check(nil, 10)
	check([]domain.Origin{domain.OriginUnspecified}, 10)
	if n, oldest, err := s.NoticeBacklog(ctx); err != nil || n != 5 || !oldest.Equal(all[4].DequeuedAt) {
		t.Fatalf("backlog %d, oldest %v (%v)", n, oldest, err)
	}
	if err := s.RemoveNotices(ctx, all[1:3]); err != nil {
		t.Fatal(err)
	}
	check(domain.Origins, 10, 4, 3, 0)
}
