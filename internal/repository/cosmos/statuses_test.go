package cosmos_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/repository"
	"github.com/energydatahub/messagehub/internal/repository/cosmos"
)

// A partition still throttled after every retry is unavailable, which
// callers may retry later, not an internal error: the mapping of errors.go
// at the store's boundary.
func TestThrottledAfterEveryRetryIsUnavailable(t *testing.T) {
	f := newFaulty()
	store := open(t, cosmos.Config{Transport: f})
	repo := repository.New(store, repository.Options{}, nil)
	t.Cleanup(repo.Close)
	f.set(func(*http.Request) int { return http.StatusTooManyRequests })
	ctx := context.Background()
	r := uuid.NewString()
	_, err := store.LoadRecipient(ctx, r)
	expectUnavailable(t, "LoadRecipient", err)
	_, err = store.BundleExists(ctx, r, uuid.NewString())
	expectUnavailable(t, "BundleExists", err)
	_, err = store.DequeuedBundles(ctx, r)
	expectUnavailable(t, "DequeuedBundles", err)
	expectUnavailable(t, "Recipients", store.Recipients(ctx, func(string) error { return nil }))
	// The other methods, with a server that stays unavailable (retried for
	// less long than a throttled one).
	f.set(func(*http.Request) int { return http.StatusServiceUnavailable })
	_, err = store.LookupIDs(ctx, []string{uuid.NewString()})
	expectUnavailable(t, "LookupIDs", err)
	_, err = store.ReadDrawer(ctx, uuid.NewString(), 0, 10, 10)
	expectUnavailable(t, "ReadDrawer", err)
	_, err = store.Backlog(ctx)
	expectUnavailable(t, "Backlog", err)
	expectUnavailable(t, "ApplySweep", store.ApplySweep(ctx, repository.Sweep{Recipient: r, Bundles: []string{uuid.NewString()}}))
	_, err = store.Notices(ctx, domain.Origins, 10)
	expectUnavailable(t, "Notices", err)
	_, err = store.HoldSweepLease(ctx, "me", time.Minute)
	expectUnavailable(t, "HoldSweepLease", err)
	_, _, err = store.AcquireBuild(ctx, r, uuid.NewString(), "me", time.Minute)
	expectUnavailable(t, "AcquireBuild", err)
	_, err = repo.Peek(ctx, r, domain.GroupAll, "")
	expectUnavailable(t, "Peek", err)
}

func expectUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, domain.ErrUnavailable) || errors.Is(err, repository.ErrConflict) {
		t.Fatalf("%s: got %v, want unavailable", what, err)
	}
}
