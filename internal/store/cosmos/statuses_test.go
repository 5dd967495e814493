package cosmos_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
)

// A partition still throttled after every retry is unavailable, which
// callers may retry later, not an internal error: the mapping of errors.go
// at the store's boundary.
func TestThrottledAfterEveryRetryIsUnavailable(t *testing.T) {
	f := newFaulty()
	st := open(t, cosmos.Config{Transport: f})
	repo := hub.New(st, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	f.set(func(*http.Request) int { return http.StatusTooManyRequests })
	ctx := context.Background()
	r := uuid.NewString()
	_, err := st.LoadRecipient(ctx, r)
	expectUnavailable(t, "LoadRecipient", err)
	_, err = st.BundleExists(ctx, r, uuid.NewString())
	expectUnavailable(t, "BundleExists", err)
	_, err = st.DequeuedBundles(ctx, r)
	expectUnavailable(t, "DequeuedBundles", err)
	expectUnavailable(t, "Recipients", st.Recipients(ctx, func(string) error { return nil }))
	// The other methods, with a server that stays unavailable (retried for
	// less long than a throttled one).
	f.set(func(*http.Request) int { return http.StatusServiceUnavailable })
	_, err = st.LookupIDs(ctx, []string{uuid.NewString()})
	expectUnavailable(t, "LookupIDs", err)
	_, err = st.ReadDrawer(ctx, uuid.NewString(), 0, 10, 10)
	expectUnavailable(t, "ReadDrawer", err)
	_, err = st.ScanBacklog(ctx, func(store.RecipientRecords) error { return nil })
	expectUnavailable(t, "ScanBacklog", err)
	_, err = st.ReadFigures(ctx, store.FigureLists)
	expectUnavailable(t, "ReadFigures", err)
	expectUnavailable(t, "WriteFigures", st.WriteFigures(ctx, "me", store.BacklogFigures{}, store.FigureLists))
	_, err = st.ChangedBacklog(ctx, "")
	expectUnavailable(t, "ChangedBacklog", err)
	_, err = st.HoldFiguresLease(ctx, "me", time.Minute)
	expectUnavailable(t, "HoldFiguresLease", err)
	expectUnavailable(t, "DueRecipients", st.DueRecipients(ctx, time.Now(), time.Now(), func(string) error { return nil }))
	expectUnavailable(t, "ApplySweep", st.ApplySweep(ctx, store.Sweep{Recipient: r, Bundles: []bundle.Record{{ID: uuid.NewString()}}}))
	_, err = st.Notices(ctx, domain.Origins, 10)
	expectUnavailable(t, "Notices", err)
	_, err = st.HoldSweepLease(ctx, "me", time.Minute)
	expectUnavailable(t, "HoldSweepLease", err)
	_, _, err = st.AcquireBuild(ctx, r, uuid.NewString(), "me", time.Minute)
	expectUnavailable(t, "AcquireBuild", err)
	_, err = repo.Peek(ctx, r, domain.GroupAll, "")
	expectUnavailable(t, "Peek", err)
}

func expectUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, domain.ErrUnavailable) || errors.Is(err, store.ErrConflict) {
		t.Fatalf("%s: got %v, want unavailable", what, err)
	}
}
