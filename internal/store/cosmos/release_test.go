package cosmos_test

import (
	"context"
	"errors"
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

// A release under every fault a write may meet (its answer lost once or
// on every attempt, or refused): asked again while it fails, as an
// operator would, it ends released exactly once. NOT_FOUND "was released"
// on a second ask says the first applied. The released id is refused, and
// the next Peek cuts the same notifications afresh.
func TestAReleaseSurvivesALostOrRefusedAnswer(t *testing.T) {
	for _, f := range writeFaults {
		name := string(f.kind)
		if f.count == 1 {
			name += "-once"
		}
		t.Run(name, func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			repo := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
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
			inject(t, db, cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: "released", Kind: f.kind, Count: f.count})
			_, err = repo.ReleaseBundle(ctx, r, b.ID)
			if fired(t, db) == 0 {
				t.Fatal("the fault never fired; the test tested nothing")
			}
			clearFaults(t, db)
			if err != nil {
				if _, err = repo.ReleaseBundle(ctx, r, b.ID); errors.Is(err, domain.ErrNotFound) && strings.Contains(err.Error(), "was released") {
					err = nil
				}
			}
			if err != nil {
				t.Fatalf("release: %v", err)
			}
			if _, err := repo.Peek(ctx, r, domain.GroupAll, b.ID); !errors.Is(err, domain.ErrBundleIDInUse) {
				t.Fatalf("peek naming the released id: %v", err)
			}
			again, err := repo.Peek(ctx, r, domain.GroupAll, "")
			if err != nil || again == nil || again.ID == b.ID || !slices.Equal(again.NotificationIDs, ids(ns)) {
				t.Fatalf("peek after the release = %v, %v; want the three under a new id", again, err)
			}
		})
	}
}
