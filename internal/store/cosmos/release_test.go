package cosmos_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A release under every fault a write may meet (its answer lost once or
// on every attempt, or refused) ends released exactly once. Lost once, the
// transport's resend meets the release's own effect (412 on the bundle's
// etag) and the store, asking the primary, reports success. Failing, it is
// asked again, as an operator would. NOT_FOUND "was released"
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
			if err != nil && f.count == 1 {
				// The transport's resend met the release's own effect,
				// which the store recognises on the primary.
				t.Fatalf("a release whose answer was lost once: %v", err)
			}
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
