package storetest

import (
	"testing"

	"github.com/energydatahub/messagehub/internal/domain"
)

// backlogCountsPending checks that a recount (sumBacklog) counts the bundles peeked and
// not yet dequeued, per domain, with when the oldest was cut; a dequeued
// bundle is not counted.
func backlogCountsPending(t *testing.T, s *storeEnv) {
	a, b := newRecipient(), newRecipient()
	s.commit(notes(4, a, domain.OriginCharges, "c")...)
	s.commit(notes(2, b, domain.OriginCharges, "c")...)
	s.commit(notes(2, b, domain.OriginTimeSeries, "t")...)
	oldest := s.create(a, s.record(domain.OriginCharges, "c", 0, 2))
	s.create(b, s.record(domain.OriginCharges, "c", 0, 1))
	s.acknowledge(b, s.create(b, s.record(domain.OriginTimeSeries, "t", 0, 2)))
	got, err := sumBacklog(ctx(t), s.store)
	if err != nil {
		t.Fatal(err)
	}
	charges, series := got.ByOrigin[domain.OriginCharges], got.ByOrigin[domain.OriginTimeSeries]
	if charges.PendingBundles != 2 || !charges.OldestPending.Equal(oldest.CreatedAt) {
		t.Fatalf("pending charges bundles %d, oldest %v; want 2, cut at %v", charges.PendingBundles, charges.OldestPending, oldest.CreatedAt)
	}
	if series.PendingBundles != 0 || !series.OldestPending.IsZero() {
		t.Fatalf("a dequeued bundle is counted as pending: %+v", series)
	}
}
