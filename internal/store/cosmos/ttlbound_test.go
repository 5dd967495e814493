package cosmos_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/store/cosmos"
)

// Cosmos DB refuses an item whose ttl is not -1 or 1..2^31-1 seconds (400),
// as the test server does: every ttl the store derives from the longest
// retention and build lease the configuration takes must fit.

// A dequeued bundle whose document names no drawers expires a margin after
// the retention; at the longest retention that ttl still fits.
func TestTheLongestRetentionGivesADequeuedBundleAValidTTL(t *testing.T) {
	// An int32 cannot be over 2^31-1: an overflow shows as a ttl below the
	// retention (negative).
	ttl := cosmos.DequeuedTTL(cosmos.MaxRetention)
	if time.Duration(ttl)*time.Second < cosmos.MaxRetention {
		t.Fatalf("a retention of %s gives a dequeued bundle the ttl %d s", cosmos.MaxRetention, ttl)
	}
}

// The longest build lease is taken, renewed and released on the test server,
// which refuses a lease document whose ttl overflowed.
func TestTheLongestBuildLeaseIsTaken(t *testing.T) {
	s := open(t, cosmos.Config{})
	ctx := context.Background()
	recipient, bundle, holder := uuid.NewString(), uuid.NewString(), uuid.NewString()
	for range 2 { // the create, then the renewal's replace
		current, _, err := s.AcquireBuild(ctx, recipient, bundle, holder, cosmos.MaxBuildLease)
		if err != nil || current != holder {
			t.Fatalf("a lease of %s: held by %q (%v), want %q", cosmos.MaxBuildLease, current, err, holder)
		}
	}
	if err := s.ReleaseBuild(ctx, recipient, bundle, holder); err != nil {
		t.Fatal(err)
	}
}
