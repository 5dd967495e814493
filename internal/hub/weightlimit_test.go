package hub_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// The largest bundle weight the configuration takes (--max-bundle-weight
// has no upper bound) cuts bundles like any other: reading ahead for it must
// not overflow.
func TestTheLargestBundleWeightLimitCutsBundles(t *testing.T) {
	s, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	repo := hub.New(s, hub.Options{MaxBundleWeight: math.MaxInt64, SweepInterval: time.Hour}, nil)
	defer func() { repo.Close(); _ = s.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := uuid.NewString()
	var ns []domain.Notification
	for range 3 {
		ns = append(ns, domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: domain.OriginCharges,
			ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: domain.MaxWeight})
	}
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	b, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil || len(b.NotificationIDs) != len(ns) || b.Weight != 3*domain.MaxWeight {
		t.Fatalf("peek: %+v (%v), want one bundle of all %d", b, err, len(ns))
	}
}
