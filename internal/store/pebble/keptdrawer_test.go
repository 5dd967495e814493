package pebble_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// A drained cabinet's last drawer stays in its entry while the bundle that
// read it is retained. The sweep that visits the recipient within the
// clocks' margin (a minute) after that bundle became due deletes the bundle
// and the entry but keeps the drawer for the margin (Sweep.Keep). The
// embedded store keeps no record of kept drawers: it finds them through the
// records of the bundles that name them, so a drawer that no record names
// once that bundle is gone must go with it; else its pages and its
// notifications' ids stay for good, and a notification saved again past its
// retention is taken for a duplicate and never delivered.
func TestADrawerKeptForTheClocksMarginGoesWithItsBundles(t *testing.T) {
	ctx := context.Background()
	s, repo, at := retentionEnv(t)

	r := uuid.NewString()
	n := domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: domain.OriginCharges, ContentType: "c", DocumentType: "d", Weight: 1}
	if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
		t.Fatal(err)
	}
	saved, err := s.LookupIDs(ctx, []string{n.ID})
	if err != nil || len(saved) != 1 {
		t.Fatalf("the saved id: %v (%v)", saved, err)
	}
	b, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v, %v", b, err)
	}
	if err := repo.Dequeue(ctx, r, b.ID); err != nil {
		t.Fatal(err)
	}
	sweepAt := func(d time.Duration) {
		t.Helper()
		at(d)
		if err := repo.SweepNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sweepAt(time.Minute)                // the drained cabinet keeps its drawer
	sweepAt(retention + 30*time.Second) // the bundle is due, within the margin
	sweepAt(retention + 2*time.Minute)  // the margin is over
	sweepAt(10 * retention)             // long past everything
	found, err := s.LookupIDs(ctx, []string{n.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := found[n.ID]; ok {
		t.Fatalf("the id of a notification dequeued %s ago, past its retention of %s, is still stored", 10*retention, retention)
	}
	if items, err := s.ReadDrawer(ctx, saved[n.ID].DrawerID, 0, 1, 10); err != nil || len(items) != 0 {
		t.Fatalf("its drawer still reads %d items (%v)", len(items), err)
	}
	if exists, err := s.BundleExists(ctx, r, b.ID); err != nil || exists {
		t.Fatalf("the bundle, dequeued %s ago, is still retained (%v)", 10*retention, err)
	}
	res, err := repo.Save(ctx, []domain.Notification{n})
	if err != nil || res.Saved != 1 {
		t.Fatalf("saved again past its retention: %+v (%v), want it saved, not a duplicate", res, err)
	}
}

// A drawer kept for a bundle that is still retained stays readable, even
// when the sweep that keeps it deletes an earlier bundle that read it too
// and is due within the clocks' margin; it goes once the later one is due.
func TestADrawerKeptForARetainedBundleStaysReadable(t *testing.T) {
	ctx := context.Background()
	s, repo, at := retentionEnv(t)

	r := uuid.NewString()
	var ns []domain.Notification
	for range 2 { // a bundle each, from one drawer
		ns = append(ns, domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: domain.OriginCharges, ContentType: "c", DocumentType: "d", Weight: 1})
	}
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	dequeue := func() string {
		t.Helper()
		b, err := repo.Peek(ctx, r, domain.GroupAll, "")
		if err != nil || b == nil || len(b.NotificationIDs) != 1 {
			t.Fatalf("peek: %v, %v", b, err)
		}
		if err := repo.Dequeue(ctx, r, b.ID); err != nil {
			t.Fatal(err)
		}
		return b.ID
	}
	// Not bundleable: one notification a bundle.
	first := dequeue()
	at(retention - 10*time.Minute)
	second := dequeue()
	for _, d := range []time.Duration{retention + 30*time.Second, retention + 2*time.Minute} {
		at(d)
		if err := repo.SweepNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if exists, err := s.BundleExists(ctx, r, first); err != nil || exists {
		t.Fatalf("the first bundle, due, is still retained (%v)", err)
	}
	b, err := repo.DequeuedBundle(ctx, r, second)
	if err != nil || len(b.NotificationIDs) != 1 || b.NotificationIDs[0] != ns[1].ID {
		t.Fatalf("the retained bundle reads back %v (%v), want %s", b, err, ns[1].ID)
	}
	at(3 * retention)
	if err := repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if found, err := s.LookupIDs(ctx, []string{ns[0].ID, ns[1].ID}); err != nil || len(found) != 0 {
		t.Fatalf("ids still stored past the retention of both bundles: %v (%v)", found, err)
	}
}

// retention is the retention of the hubs of retentionEnv.
const retention = time.Hour

// retentionEnv opens the store chain the binary opens and a hub over it
// whose clock at sets, d after a fixed start; it closes both at the end.
func retentionEnv(t *testing.T) (store.Store, *hub.Hub, func(d time.Duration)) {
	t.Helper()
	s := openChain(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var now atomic.Int64
	now.Store(t0.UnixNano())
	repo := hub.New(s, hub.Options{Retention: retention, SweepInterval: time.Hour, Now: func() time.Time { return time.Unix(0, now.Load()) }}, nil)
	t.Cleanup(func() { repo.Close(); _ = s.Close() })
	return s, repo, func(d time.Duration) { now.Store(t0.Add(d).UnixNano()) }
}
