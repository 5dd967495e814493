package hub_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// remedyEnv is a hub over a pebble store that writes notices for every domain's
// dequeues, with bundles of at most 4 notifications of weight 1, a clock
// the test moves and a record of the bundles retention forgot.
type remedyEnv struct {
	hub       *hub.Hub
	store     *writeCounter
	mu        sync.Mutex
	now       time.Time
	forgotten []string
}

func newRemedyEnv(t *testing.T) *remedyEnv {
	t.Helper()
	return newRemedyEnvWith(t, 0)
}

// newRemedyEnvWith is newRemedyEnv whose AcknowledgeOnBehalf dequeues at
// most maxAcknowledge bundles a call (0: the default).
func newRemedyEnvWith(t *testing.T, maxAcknowledge int) *remedyEnv {
	t.Helper()
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	env := &remedyEnv{store: &writeCounter{Store: inner}, now: time.UnixMilli(1_700_000_000_000)}
	env.hub = hub.New(env.store, hub.Options{
		MaxBundleWeight: 4, Retention: time.Hour, SweepInterval: time.Hour, MaxAcknowledgeBundles: maxAcknowledge,
		Now:     func() time.Time { env.mu.Lock(); defer env.mu.Unlock(); return env.now },
		Notices: func(domain.Origin) bool { return true },
		ForgetBundles: func(_ context.Context, _ string, ids []string, _ func(context.Context) error) error {
			env.mu.Lock()
			env.forgotten = append(env.forgotten, ids...)
			env.mu.Unlock()
			return nil
		},
	}, nil)
	t.Cleanup(func() {
		env.hub.Close()
		_ = inner.Close()
	})
	return env
}

func (e *remedyEnv) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mu.Unlock()
}

// save stores n notifications of one cabinet for the recipient and returns
// their ids in order.
func (e *remedyEnv) save(t *testing.T, recipient string, origin domain.Origin, contentType string, n int, bundling bool) []string {
	t.Helper()
	ns := make([]domain.Notification, n)
	for i := range ns {
		ns[i] = domain.Notification{
			ID: uuid.NewString(), Recipient: recipient, Origin: origin,
			ContentType: contentType, DocumentType: "doc", SupportsBundling: bundling, Weight: 1,
		}
	}
	if _, err := e.hub.Save(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return noteIDs(ns)
}

func (e *remedyEnv) peek(t *testing.T, recipient string, group domain.PeekGroup, bundleID string) *domain.Bundle {
	t.Helper()
	b, err := e.hub.Peek(context.Background(), recipient, group, bundleID)
	if err != nil {
		t.Fatalf("peek: %v", err)
	}
	return b
}

// notices returns the bundle ids of the outbox's notices for the recipient.
func (e *remedyEnv) notices(t *testing.T, recipient string) []string {
	t.Helper()
	ns, err := e.store.Notices(context.Background(), domain.Origins, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range ns {
		if n.Recipient == recipient {
			ids = append(ids, n.BundleID)
		}
	}
	slices.Sort(ids)
	return ids
}

func wantErr(t *testing.T, what string, err, kind error, words string) {
	t.Helper()
	if !errors.Is(err, kind) || !strings.Contains(err.Error(), words) {
		t.Fatalf("%s: got %v, want %v saying %q", what, err, kind, words)
	}
}

// A released bundle is no longer pending: the next Peek cuts the same
// notifications afresh under a new id, Dequeue does not know the released
// id, and a Peek naming it is refused (its holder must not get other
// notifications under it) until retention removes its record.
func TestReleaseBundleLetsTheNextPeekCutAfresh(t *testing.T) {
	ctx := context.Background()
	env := newRemedyEnv(t)
	recipient := uuid.NewString()
	ids := env.save(t, recipient, domain.OriginTimeSeries, "rsm-012", 6, true)
	held := uuid.NewString()
	first := env.peek(t, recipient, domain.GroupAll, held)
	if first.ID != held || !slices.Equal(first.NotificationIDs, ids[:4]) {
		t.Fatalf("first peek: %+v", first)
	}

	rec, err := env.hub.ReleaseBundle(ctx, recipient, held)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID != held || rec.Count != 4 || rec.State != bundle.Pending || rec.Origin != domain.OriginTimeSeries {
		t.Fatalf("released: %+v", rec)
	}
	if pending, err := env.hub.IsPending(ctx, recipient, held); err != nil || pending {
		t.Fatalf("released bundle still pending: %v, %v", pending, err)
	}
	wantErr(t, "dequeue of the released id", env.hub.Dequeue(ctx, recipient, held), domain.ErrNotFound, held)
	_, err = env.hub.Peek(ctx, recipient, domain.GroupAll, held)
	wantErr(t, "peek naming the released id", err, domain.ErrBundleIDInUse, "released")
	_, err = env.hub.ReleaseBundle(ctx, recipient, held)
	wantErr(t, "second release", err, domain.ErrNotFound, "was released")

	again := env.peek(t, recipient, domain.GroupTimeSeries, "")
	if again.ID == held || !slices.Equal(again.NotificationIDs, ids[:4]) {
		t.Fatalf("peek after release: %+v", again)
	}
	if tr, err := env.hub.TraceNotification(ctx, recipient, ids[0]); err != nil || tr.State != hub.TracePending || tr.Bundle.ID != again.ID {
		t.Fatalf("trace after release: %+v, %v", tr, err)
	}
	if err := env.hub.Dequeue(ctx, recipient, again.ID); err != nil {
		t.Fatal(err)
	}
	if tr, err := env.hub.TraceNotification(ctx, recipient, ids[0]); err != nil || tr.State != hub.TraceDequeued || tr.Bundle.ID != again.ID {
		t.Fatalf("trace names the released bundle, not the dequeued one: %+v, %v", tr, err)
	}
	_, err = env.hub.ReleaseBundle(ctx, recipient, again.ID)
	wantErr(t, "release of a dequeued bundle", err, domain.ErrNotFound, "dequeued at")
	_, err = env.hub.ReleaseBundle(ctx, recipient, uuid.NewString())
	wantErr(t, "release of an unknown bundle", err, domain.ErrNotFound, "has no bundle")
	if got, want := env.notices(t, recipient), []string{again.ID}; !slices.Equal(got, want) {
		t.Fatalf("notices %v, want only the dequeue's %v", got, want)
	}

	// Retention removes the released record with the dequeued ones; only
	// then is its id free again.
	env.advance(2 * time.Hour)
	if err := env.hub.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(env.forgotten, held) {
		t.Fatalf("retention forgot %v, not the released %s", env.forgotten, held)
	}
	if used, err := env.store.BundleExists(ctx, recipient, held); err != nil || used {
		t.Fatalf("released record after the retention: %v, %v", used, err)
	}
	if b := env.peek(t, recipient, domain.GroupAll, held); b == nil || !slices.Equal(b.NotificationIDs, ids[4:]) {
		t.Fatalf("peek with the forgotten id: %+v", b)
	}
}

// Acknowledging on an actor's behalf dequeues the cabinet up to and
// including the notification named, in bundles cut by the bundling rule,
// each with its dequeue notice; the rest stays for the actor.
func TestAcknowledgeOnBehalfDequeuesUpToTheNotification(t *testing.T) {
	ctx := context.Background()
	env := newRemedyEnv(t)
	recipient := uuid.NewString()
	ids := env.save(t, recipient, domain.OriginTimeSeries, "rsm-012", 10, true)
	other := env.save(t, recipient, domain.OriginAggregations, "rsm-014", 2, true)

	done, err := env.hub.AcknowledgeOnBehalf(ctx, recipient, domain.OriginTimeSeries, "rsm-012", ids[6])
	if err != nil {
		t.Fatal(err)
	}
	if len(done.Bundles) != 2 || done.Notifications != 7 || done.Bundles[0].Count != 4 || done.Bundles[1].Count != 3 {
		t.Fatalf("acknowledged: %+v", done)
	}
	var bundleIDs []string
	for _, b := range done.Bundles {
		if b.State != bundle.Dequeued {
			t.Fatalf("bundle %+v is not dequeued", b)
		}
		bundleIDs = append(bundleIDs, b.ID)
	}
	slices.Sort(bundleIDs)
	if got := env.notices(t, recipient); !slices.Equal(got, bundleIDs) {
		t.Fatalf("notices %v, want %v", got, bundleIDs)
	}
	for i, id := range ids[:7] {
		tr, err := env.hub.TraceNotification(ctx, recipient, id)
		if err != nil || tr.State != hub.TraceDequeued || tr.Bundle.ID != done.Bundles[i/4].ID {
			t.Fatalf("notification %d: %+v, %v", i, tr, err)
		}
	}
	if b := env.peek(t, recipient, domain.GroupTimeSeries, ""); !slices.Equal(b.NotificationIDs, ids[7:]) {
		t.Fatalf("the actor's next bundle: %v, want %v", b.NotificationIDs, ids[7:])
	}
	if b := env.peek(t, recipient, domain.GroupAggregations, ""); !slices.Equal(b.NotificationIDs, other) {
		t.Fatalf("another cabinet was touched: %v", b.NotificationIDs)
	}
	// A dequeued bundle of the hub's is read back for its domain as any.
	b, err := env.hub.DequeuedBundle(ctx, recipient, done.Bundles[1].ID)
	if err != nil || !slices.Equal(b.NotificationIDs, ids[4:7]) {
		t.Fatalf("dequeued bundle: %+v, %v", b, err)
	}

	// Retention treats them like any dequeued bundle.
	env.advance(2 * time.Hour)
	if err := env.hub.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range bundleIDs {
		if !slices.Contains(env.forgotten, id) {
			t.Fatalf("retention did not remove %s (forgot %v)", id, env.forgotten)
		}
	}
}

// A pending bundle of the cabinet in the way is acknowledged whole, even
// when the notification named lies within it; its holder's Dequeue then
// finds nothing. Notifications that do not support bundling go one bundle
// each, as Peek would cut them.
func TestAcknowledgeOnBehalfTakesThePendingBundleInTheWay(t *testing.T) {
	ctx := context.Background()
	env := newRemedyEnv(t)
	recipient := uuid.NewString()
	ids := env.save(t, recipient, domain.OriginCharges, "rsm-031", 6, true)
	single := env.save(t, recipient, domain.OriginCharges, "rsm-031", 3, false)
	held := env.peek(t, recipient, domain.GroupMasterData, "")

	done, err := env.hub.AcknowledgeOnBehalf(ctx, recipient, domain.OriginCharges, "rsm-031", ids[1])
	if err != nil {
		t.Fatal(err)
	}
	if len(done.Bundles) != 1 || done.Bundles[0].ID != held.ID || done.Notifications != 4 {
		t.Fatalf("acknowledged: %+v", done)
	}
	wantErr(t, "the holder's dequeue", env.hub.Dequeue(ctx, recipient, held.ID), domain.ErrNotFound, held.ID)

	done, err = env.hub.AcknowledgeOnBehalf(ctx, recipient, domain.OriginCharges, "rsm-031", single[1])
	if err != nil {
		t.Fatal(err)
	}
	if len(done.Bundles) != 3 || done.Notifications != 4 || done.Bundles[0].Count != 2 || done.Bundles[1].Count != 1 || done.Bundles[2].Count != 1 {
		t.Fatalf("acknowledged %+v, want bundles of 2, 1 and 1", done)
	}
	if b := env.peek(t, recipient, domain.GroupAll, ""); !slices.Equal(b.NotificationIDs, single[2:]) {
		t.Fatalf("the actor's next bundle: %v", b.NotificationIDs)
	}
}

// Requests that cannot be served are refused with a clear error and change
// nothing: a notification unknown, another recipient's or of another
// cabinet, and a cabinet blocked by another cabinet's pending bundle of the
// same peek group. A notification dequeued already leaves nothing to do.
func TestAcknowledgeOnBehalfRefusesAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	env := newRemedyEnv(t)
	recipient, stranger := uuid.NewString(), uuid.NewString()
	roles := env.save(t, recipient, domain.OriginMarketRoles, "rsm-004", 3, true)
	charges := env.save(t, recipient, domain.OriginCharges, "rsm-031", 3, true)
	foreign := env.save(t, stranger, domain.OriginMarketRoles, "rsm-004", 1, true)
	first := env.peek(t, recipient, domain.GroupMasterData, "") // the market roles: saved first
	if !slices.Equal(first.NotificationIDs, roles) {
		t.Fatalf("peek: %+v", first)
	}
	if err := env.hub.Dequeue(ctx, recipient, first.ID); err != nil {
		t.Fatal(err)
	}
	pending := env.peek(t, recipient, domain.GroupMasterData, "") // the charges
	before := env.store.n()

	for _, tc := range []struct {
		what        string
		origin      domain.Origin
		contentType string
		upTo        string
		kind        error
		words       string
	}{
		{"an unknown notification", domain.OriginMarketRoles, "rsm-004", uuid.NewString(), domain.ErrNotFound, "not stored"},
		{"another recipient's", domain.OriginMarketRoles, "rsm-004", foreign[0], domain.ErrNotFound, "not one of recipient"},
		{"another cabinet's", domain.OriginMarketRoles, "rsm-004", charges[0], domain.ErrInvalidArgument, "DOMAIN_CHARGES/rsm-031"},
		{"another content type", domain.OriginCharges, "rsm-032", charges[0], domain.ErrInvalidArgument, "not in DOMAIN_CHARGES/rsm-032"},
	} {
		_, err := env.hub.AcknowledgeOnBehalf(ctx, recipient, tc.origin, tc.contentType, tc.upTo)
		wantErr(t, tc.what, err, tc.kind, tc.words)
	}

	done, err := env.hub.AcknowledgeOnBehalf(ctx, recipient, domain.OriginMarketRoles, "rsm-004", roles[2])
	if err != nil || len(done.Bundles) != 0 || done.Notifications != 0 || done.More {
		t.Fatalf("acknowledging up to a dequeued notification: %+v, %v; want nothing to do", done, err)
	}

	// A market roles notification saved now is blocked by the charges
	// bundle pending in the master data group.
	later := env.save(t, recipient, domain.OriginMarketRoles, "rsm-004", 1, true)
	before++
	_, err = env.hub.AcknowledgeOnBehalf(ctx, recipient, domain.OriginMarketRoles, "rsm-004", later[0])
	wantErr(t, "another cabinet's pending bundle in the group", err, domain.ErrOtherBundlePending, pending.ID)
	if n := env.store.n(); n != before {
		t.Fatalf("refused calls wrote %d times", n-before)
	}
	if b := env.peek(t, recipient, domain.GroupMasterData, ""); b.ID != pending.ID {
		t.Fatalf("the pending bundle changed: %+v", b)
	}
}

// A backlog of notifications that do not support bundling is one bundle
// each: one call dequeues at most MaxAcknowledgeBundles of them, durable,
// says whether notifications up to the one named remain, and the same call
// again goes on from there until none do; a further call finds nothing to
// do. Every bundle dequeued is answered once and noticed to the domain.
func TestAcknowledgeOnBehalfDequeuesABoundedNumberOfBundlesACall(t *testing.T) {
	ctx := context.Background()
	env := newRemedyEnvWith(t, 3)
	for _, tc := range []struct {
		n     int
		calls []int // bundles per call
	}{
		{8, []int{3, 3, 2}},
		{6, []int{3, 3}}, // the last call ends at the bound: nothing more
	} {
		recipient := uuid.NewString()
		ids := env.save(t, recipient, domain.OriginCharges, "rsm-031", tc.n, false)
		var answered []string
		for i, want := range tc.calls {
			done, err := env.hub.AcknowledgeOnBehalf(ctx, recipient, domain.OriginCharges, "rsm-031", ids[tc.n-1])
			if err != nil {
				t.Fatalf("%d notifications, call %d: %v", tc.n, i, err)
			}
			if more := i < len(tc.calls)-1; len(done.Bundles) != want || done.Notifications != int64(want) || done.More != more {
				t.Fatalf("%d notifications, call %d: %d bundles, %d notifications, more %t; want %d, %d, %t",
					tc.n, i, len(done.Bundles), done.Notifications, done.More, want, want, more)
			}
			for _, b := range done.Bundles {
				answered = append(answered, b.ID)
			}
			// What the call answered is durable: the actor's cursor is past it.
			tr, err := env.hub.TraceNotification(ctx, recipient, ids[len(answered)-1])
			if err != nil || tr.State != hub.TraceDequeued {
				t.Fatalf("notification %d after call %d: %+v, %v", len(answered)-1, i, tr, err)
			}
		}
		slices.Sort(answered)
		if got := env.notices(t, recipient); !slices.Equal(got, answered) || len(answered) != tc.n {
			t.Fatalf("%d notifications: notices %v, answered %v", tc.n, got, answered)
		}
		done, err := env.hub.AcknowledgeOnBehalf(ctx, recipient, domain.OriginCharges, "rsm-031", ids[tc.n-1])
		if err != nil || len(done.Bundles) != 0 || done.More {
			t.Fatalf("%d notifications, once more: %+v, %v; want nothing to do", tc.n, done, err)
		}
		if b := env.peek(t, recipient, domain.GroupAll, ""); b != nil {
			t.Fatalf("%d notifications: the actor still peeks %v", tc.n, b.NotificationIDs)
		}
	}
}
