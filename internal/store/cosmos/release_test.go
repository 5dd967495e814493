package cosmos_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A release whose answer is lost is sent again and meets its own effect
// (412 on the bundle's etag): the store asks the primary, finds the bundle
// released at its own moment and reports success, so the operator is not
// told "not pending" about the release that worked.
func TestAReplayedReleaseFindsItsOwnEffect(t *testing.T) {
	l := &lossy{next: cosmostest.NewHTTPClient(), match: func(req *http.Request, body string) bool {
		return toContainer(req, "recipients") && cosmos.Classify(req) == cosmos.OpBatch && strings.Contains(body, `"released"`)
	}}
	repo := hub.New(open(t, cosmos.Config{Transport: l}), hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	b, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek = %v, %v", b, err)
	}
	rec, err := repo.ReleaseBundle(ctx, r, b.ID)
	if err != nil || rec.ID != b.ID {
		t.Fatalf("release = %+v, %v", rec, err)
	}
	if l.lost.Load() == 0 {
		t.Fatal("no answer was lost; the test did not test anything")
	}
	again, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || again == nil || again.ID == b.ID || !slices.Equal(again.NotificationIDs, ids(ns)) {
		t.Fatalf("peek after the release = %v, %v; want the three under a new id", again, err)
	}
}
