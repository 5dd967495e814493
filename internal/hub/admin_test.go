package hub_test

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// writeCounter counts the writes made through it, so that a test can say
// the admin calls make none.
type writeCounter struct {
	store.Store
	mu     sync.Mutex
	writes int
}

func (s *writeCounter) count() {
	s.mu.Lock()
	s.writes++
	s.mu.Unlock()
}

func (s *writeCounter) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

func (s *writeCounter) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	s.count()
	return s.Store.CommitSaves(ctx, saves)
}

func (s *writeCounter) CreateBundle(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	s.count()
	return s.Store.CreateBundle(ctx, recipient, rec, cursor)
}

func (s *writeCounter) Acknowledge(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	s.count()
	return s.Store.Acknowledge(ctx, recipient, rec, cursor)
}

func (s *writeCounter) ReleaseBundle(ctx context.Context, recipient string, rec bundle.Record) error {
	s.count()
	return s.Store.ReleaseBundle(ctx, recipient, rec)
}

func (s *writeCounter) ApplySweep(ctx context.Context, sweep store.Sweep) error {
	s.count()
	return s.Store.ApplySweep(ctx, sweep)
}

// adminEnv is a hub over a pebble store in a temp dir, with a clock the
// test moves and bundles of at most 4 notifications of weight 1.
type adminEnv struct {
	hub   *hub.Hub
	store *writeCounter
	mu    sync.Mutex
	now   time.Time
}

func newAdminEnv(t *testing.T) *adminEnv {
	t.Helper()
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	env := &adminEnv{store: &writeCounter{Store: inner}, now: time.UnixMilli(1_700_000_000_000)}
	env.hub = hub.New(env.store, hub.Options{
		MaxBundleWeight: 4, Retention: time.Hour, SweepInterval: time.Hour,
		Now: func() time.Time { env.mu.Lock(); defer env.mu.Unlock(); return env.now },
	}, nil)
	t.Cleanup(func() {
		env.hub.Close()
		_ = inner.Close()
	})
	return env
}

func (e *adminEnv) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mu.Unlock()
}

func (e *adminEnv) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *adminEnv) save(t *testing.T, recipient string, origin domain.Origin, n int) []string {
	t.Helper()
	ns := make([]domain.Notification, n)
	for i := range ns {
		ns[i] = domain.Notification{
			ID: uuid.NewString(), Recipient: recipient, Origin: origin,
			ContentType: "rsm-014", DocumentType: "doc", SupportsBundling: true, Weight: 1,
		}
	}
	if _, err := e.hub.Save(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return noteIDs(ns)
}

func TestAdminBacklog(t *testing.T) {
	ctx := context.Background()
	env := newAdminEnv(t)
	recipient := uuid.NewString()

	if b, err := env.hub.Backlog(ctx, recipient); err != nil || len(b.Cabinets) != 0 || len(b.Pending) != 0 {
		t.Fatalf("a recipient never seen: %+v, %v", b, err)
	}

	t0 := env.clock()
	env.save(t, recipient, domain.OriginTimeSeries, 10)
	env.advance(time.Minute)
	env.save(t, recipient, domain.OriginAggregations, 3)

	b, err := env.hub.Backlog(ctx, recipient)
	if err != nil {
		t.Fatal(err)
	}
	want := []hub.CabinetBacklog{
		{Origin: domain.OriginTimeSeries, ContentType: "rsm-014", Total: 10, Waiting: 10, OldestSavedAt: t0.UnixMilli(), Weight: 10},
		{Origin: domain.OriginAggregations, ContentType: "rsm-014", Total: 3, Waiting: 3, OldestSavedAt: t0.Add(time.Minute).UnixMilli(), Weight: 3},
	}
	if !reflect.DeepEqual(b.Cabinets, want) || len(b.Pending) != 0 {
		t.Fatalf("backlog after saves:\n got %+v, %d pending\nwant %+v", b.Cabinets, len(b.Pending), want)
	}

	env.advance(time.Minute)
	peeked, err := env.hub.Peek(ctx, recipient, domain.GroupTimeSeries, "")
	if err != nil || peeked == nil {
		t.Fatalf("peek: %v, %v", peeked, err)
	}
	b, err = env.hub.Backlog(ctx, recipient)
	if err != nil {
		t.Fatal(err)
	}
	if b.Cabinets[0].InPending != 4 || b.Cabinets[0].Waiting != 10 || b.Cabinets[1].InPending != 0 {
		t.Fatalf("backlog with a pending bundle: %+v", b.Cabinets)
	}
	if len(b.Pending) != 1 {
		t.Fatalf("pending bundles: %+v", b.Pending)
	}
	p := b.Pending[0]
	if p.ID != peeked.ID || p.Count != 4 || p.Weight != 4 || p.Group != domain.GroupTimeSeries ||
		p.Origin != domain.OriginTimeSeries || !p.CreatedAt.Equal(env.clock()) || p.Start != 0 || p.End != 4 {
		t.Fatalf("pending bundle: %+v", p)
	}

	if err := env.hub.Dequeue(ctx, recipient, peeked.ID); err != nil {
		t.Fatal(err)
	}
	b, err = env.hub.Backlog(ctx, recipient)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Pending) != 0 || b.Cabinets[0].Origin != domain.OriginTimeSeries || b.Cabinets[0].Acked != 4 ||
		b.Cabinets[0].Waiting != 6 || b.Cabinets[0].OldestSavedAt != t0.UnixMilli() || b.Cabinets[0].Weight != 6 {
		t.Fatalf("backlog after the dequeue: %+v, %+v", b.Cabinets, b.Pending)
	}
}

// A cabinet's waiting weight is the sum of its waiting notifications'
// weights, read from its drawers up to hub.MaxWeighed of them; beyond that
// the sum is of those and marked partial.
func TestAdminBacklogSumsTheWaitingWeight(t *testing.T) {
	ctx := context.Background()
	env := newAdminEnv(t)
	recipient := uuid.NewString()
	notes := func(n int, weight func(i int) int64) []domain.Notification {
		ns := make([]domain.Notification, n)
		for i := range ns {
			ns[i] = domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges,
				ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: weight(i)}
		}
		return ns
	}
	if _, err := env.hub.Save(ctx, notes(50, func(i int) int64 { return int64(i%5 + 1) })); err != nil {
		t.Fatal(err)
	}
	b, err := env.hub.Backlog(ctx, recipient)
	if err != nil || len(b.Cabinets) != 1 || b.Cabinets[0].Weight != 150 || b.Cabinets[0].WeightPartial {
		t.Fatalf("50 notifications of weights 1 to 5: %+v, %v; want weight 150, complete", b.Cabinets, err)
	}
	for range 2 {
		if _, err := env.hub.Save(ctx, notes(hub.MaxWeighed/2, func(int) int64 { return 2 })); err != nil {
			t.Fatal(err)
		}
	}
	b, err = env.hub.Backlog(ctx, recipient)
	if err != nil || b.Cabinets[0].Waiting != int64(hub.MaxWeighed+50) || !b.Cabinets[0].WeightPartial ||
		b.Cabinets[0].Weight != 150+2*int64(hub.MaxWeighed-50) {
		t.Fatalf("%d notifications: %+v, %v; want the first %d weighed (%d) and partial", hub.MaxWeighed+50, b.Cabinets, err, hub.MaxWeighed, 150+2*(hub.MaxWeighed-50))
	}
}

// A preview writes nothing and leaves the state as it was; the Peek after it
// cuts the same bundle under the actor's own id, and a preview then shows
// that bundle as pending.
func TestAdminPreviewNextBundleChangesNothing(t *testing.T) {
	ctx := context.Background()
	env := newAdminEnv(t)
	recipient := uuid.NewString()

	if p, err := env.hub.PreviewNextBundle(ctx, recipient, domain.GroupAll); err != nil || p != nil {
		t.Fatalf("nothing saved: %+v, %v", p, err)
	}
	ids := env.save(t, recipient, domain.OriginTimeSeries, 6)

	before, err := env.store.LoadRecipient(ctx, recipient)
	if err != nil {
		t.Fatal(err)
	}
	writes := env.store.n()
	var preview *hub.Preview
	for range 3 {
		if preview, err = env.hub.PreviewNextBundle(ctx, recipient, domain.GroupTimeSeries); err != nil {
			t.Fatal(err)
		}
	}
	if env.store.n() != writes {
		t.Fatalf("the preview wrote %d times", env.store.n()-writes)
	}
	after, err := env.store.LoadRecipient(ctx, recipient)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("the preview changed the state:\n%+v\n%+v", before, after)
	}
	if preview == nil || preview.Pending || preview.Bundle.ID != "" || !slices.Equal(preview.Bundle.NotificationIDs, ids[:4]) ||
		preview.Record.Count != 4 || preview.Record.Weight != 4 || preview.Record.Origin != domain.OriginTimeSeries {
		t.Fatalf("preview: %+v", preview)
	}
	if p, err := env.hub.PreviewNextBundle(ctx, recipient, domain.GroupAggregations); err != nil || p != nil {
		t.Fatalf("another group: %+v, %v", p, err)
	}

	own := uuid.NewString()
	peeked, err := env.hub.Peek(ctx, recipient, domain.GroupTimeSeries, own)
	if err != nil || peeked == nil {
		t.Fatalf("peek after the preview: %v, %v", peeked, err)
	}
	if peeked.ID != own || !slices.Equal(peeked.NotificationIDs, preview.Bundle.NotificationIDs) {
		t.Fatalf("peek after the preview: %+v, preview %+v", peeked, preview.Bundle)
	}

	for _, group := range []domain.PeekGroup{domain.GroupTimeSeries, domain.GroupAll} {
		p, err := env.hub.PreviewNextBundle(ctx, recipient, group)
		if err != nil {
			t.Fatal(err)
		}
		if p == nil || !p.Pending || p.Bundle.ID != own || p.Record.ID != own || !slices.Equal(p.Bundle.NotificationIDs, ids[:4]) {
			t.Fatalf("preview of %v with a pending bundle: %+v", group, p)
		}
	}
	if err := env.hub.Dequeue(ctx, recipient, own); err != nil {
		t.Fatal(err)
	}
	p, err := env.hub.PreviewNextBundle(ctx, recipient, domain.GroupTimeSeries)
	if err != nil || p == nil || p.Pending || !slices.Equal(p.Bundle.NotificationIDs, ids[4:]) {
		t.Fatalf("preview after the dequeue: %+v, %v", p, err)
	}
}

func TestAdminTraceNotification(t *testing.T) {
	ctx := context.Background()
	env := newAdminEnv(t)
	recipient, other := uuid.NewString(), uuid.NewString()

	trace := func(id string) hub.Trace {
		t.Helper()
		tr, err := env.hub.TraceNotification(ctx, recipient, id)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}

	if tr := trace(uuid.NewString()); tr.State != hub.TraceNotFound {
		t.Fatalf("an unknown id: %+v", tr)
	}
	t0 := env.clock()
	ids := env.save(t, recipient, domain.OriginTimeSeries, 6)
	othersID := env.save(t, other, domain.OriginTimeSeries, 1)[0]
	if tr := trace(othersID); tr.State != hub.TraceElsewhere {
		t.Fatalf("another recipient's id: %+v", tr)
	}
	writes := env.store.n()
	tr := trace(ids[5])
	if tr.State != hub.TraceWaiting || tr.Origin != domain.OriginTimeSeries || tr.ContentType != "rsm-014" ||
		tr.Position != 5 || tr.SavedAt != t0.UnixMilli() || tr.Bundle != nil {
		t.Fatalf("a waiting notification: %+v", tr)
	}

	env.advance(time.Minute)
	peeked, err := env.hub.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || peeked == nil {
		t.Fatalf("peek: %v, %v", peeked, err)
	}
	tr = trace(ids[2])
	if tr.State != hub.TracePending || tr.Position != 2 || tr.Bundle == nil || tr.Bundle.ID != peeked.ID ||
		!tr.Bundle.CreatedAt.Equal(env.clock()) {
		t.Fatalf("a notification in a pending bundle: %+v", tr)
	}
	if tr := trace(ids[4]); tr.State != hub.TraceWaiting || tr.Position != 4 {
		t.Fatalf("the one after the pending bundle: %+v", tr)
	}

	env.advance(time.Minute)
	writes++ // the peek's
	if env.store.n() != writes {
		t.Fatalf("traces wrote %d times", env.store.n()-writes)
	}
	if err := env.hub.Dequeue(ctx, recipient, peeked.ID); err != nil {
		t.Fatal(err)
	}
	tr = trace(ids[2])
	if tr.State != hub.TraceDequeued || tr.Position != 2 || tr.Bundle == nil || tr.Bundle.ID != peeked.ID ||
		!tr.Bundle.DequeuedAt.Equal(env.clock()) {
		t.Fatalf("a dequeued notification: %+v", tr)
	}

	// Retention removes the bundle and its drawer once the cabinet is all
	// dequeued: the id is not found any more.
	p, err := env.hub.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || p == nil {
		t.Fatalf("second peek: %v, %v", p, err)
	}
	if err := env.hub.Dequeue(ctx, recipient, p.ID); err != nil {
		t.Fatal(err)
	}
	env.advance(2 * time.Hour)
	if err := env.hub.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if tr := trace(ids[2]); tr.State != hub.TraceNotFound {
		t.Fatalf("after retention: %+v", tr)
	}
}

// A drawer that left its entry (the cabinet drained, the drawer opened
// longer than the retention ago) is kept for the retained bundles that
// read it, each of whose records names the drawer as it was at its
// dequeue: the earlier one's a shorter run, before the later save was
// appended to it. A trace of the later notification (and an
// acknowledgement up to it) reads the drawer as far as any record names
// it, whichever record comes first, and finds it dequeued.
func TestAdminTraceFindsANotificationInAKeptDrawerPastAnEarlierRecordsRun(t *testing.T) {
	ctx := context.Background()
	env := newAdminEnv(t) // a retention of an hour
	recipient := uuid.NewString()
	// The records are listed in the order of their ids: the earlier
	// bundle's, with the shorter run, first.
	ids := []string{"00000000-0000-4000-8000-000000000000", "ffffffff-ffff-4fff-bfff-ffffffffffff"}
	var saved []string
	for i, at := range []time.Duration{0, 30 * time.Minute} { // saved at 0 and 40 minutes, dequeued at 10 and 40
		env.advance(at)
		saved = append(saved, env.save(t, recipient, domain.OriginCharges, 1)...)
		if i == 0 {
			env.advance(10 * time.Minute)
		}
		b, err := env.hub.Peek(ctx, recipient, domain.GroupAll, ids[i])
		if err != nil || b == nil || len(b.NotificationIDs) != 1 || b.NotificationIDs[0] != saved[i] {
			t.Fatalf("peek %d: %+v, %v", i, b, err)
		}
		if err := env.hub.Dequeue(ctx, recipient, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	// The drawer was opened 65 minutes ago: it leaves the drained cabinet,
	// kept for both bundles, retained still.
	env.advance(25 * time.Minute)
	if err := env.hub.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := env.store.LoadRecipient(ctx, recipient)
	if err != nil || len(st.Entries) != 0 {
		t.Fatalf("entries after the sweep: %+v (%v); want the cabinet gone, the test tests nothing", st.Entries, err)
	}
	for i, id := range saved {
		tr, err := env.hub.TraceNotification(ctx, recipient, id)
		if err != nil || tr.State != hub.TraceDequeued || tr.Position != int64(i) || tr.Bundle == nil || tr.Bundle.ID != ids[i] {
			t.Fatalf("trace of notification %d: %+v (%v); want it dequeued at position %d in bundle %s", i, tr, err, i, ids[i])
		}
	}
	done, err := env.hub.AcknowledgeOnBehalf(ctx, recipient, domain.OriginCharges, "rsm-014", saved[1])
	if err != nil || len(done.Bundles) != 0 || done.More {
		t.Fatalf("acknowledging up to a dequeued notification: %+v (%v); want nothing to do", done, err)
	}
}
