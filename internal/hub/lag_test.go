package hub_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// laggingStore answers drawer reads as a replica behind the catalog would:
// while lags is above zero, each ReadDrawer leaves out positions [from, to)
// of every drawer (a page the replica has not received yet) and returns
// the items after them in their place. ReadDrawerLatest does not lag.
type laggingStore struct {
	store.Store
	from, to int64

	mu        sync.Mutex
	lags      int   // stale reads still to serve
	hid       int   // stale reads served
	watermark int64 // when above zero, the most a load's watermark shows
}

func (s *laggingStore) ReadDrawer(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lags == 0 {
		return s.Store.ReadDrawer(ctx, drawerID, from, to, limit)
	}
	items, err := s.Store.ReadDrawer(ctx, drawerID, from, to, limit+int(s.to-s.from))
	if err != nil {
		return nil, err
	}
	s.lags--
	s.hid++
	items = slices.DeleteFunc(items, func(it drawer.Item) bool { return it.Pos >= s.from && it.Pos < s.to })
	return items[:min(len(items), limit)], nil
}

// LoadRecipient shows the watermark no higher than s.watermark, as while
// the saves above it are under way.
func (s *laggingStore) LoadRecipient(ctx context.Context, recipient string, opts ...store.LoadOption) (store.RecipientState, error) {
	st, err := s.Store.LoadRecipient(ctx, recipient, opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watermark > 0 {
		st.Head.Watermark = min(st.Head.Watermark, s.watermark)
	}
	return st, err
}

func (s *laggingStore) lag(n int) {
	s.mu.Lock()
	s.lags = n
	s.mu.Unlock()
}

func (s *laggingStore) served() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hid
}

func lagEnv(t *testing.T, from, to int64) (*hub.Hub, *laggingStore) {
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	store := &laggingStore{Store: inner, from: from, to: to}
	repo := hub.New(store, hub.Options{}, nil)
	t.Cleanup(func() {
		repo.Close()
		_ = inner.Close()
	})
	return repo, store
}

func tenNotes(recipient string) []domain.Notification {
	ns := make([]domain.Notification, 10)
	for i := range ns {
		ns[i] = domain.Notification{
			ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginTimeSeries,
			ContentType: "rsm-014", DocumentType: fmt.Sprintf("doc-%d", i), SupportsBundling: true, Weight: 1,
		}
	}
	return ns
}

func noteIDs(ns []domain.Notification) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.ID)
	}
	return out
}

// A drawer read that lacks a saved page is stale, not a hole: the bundle
// is cut from a fresh read and holds every notification, so the dequeue
// acknowledges nothing that was never delivered.
func TestPeekNeverCutsAroundAPageItDidNotRead(t *testing.T) {
	repo, store := lagEnv(t, 3, 6)
	recipient := uuid.NewString()
	ns := tenNotes(recipient)
	ctx := context.Background()
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	b := stalePeek(t, repo, store, recipient)
	if b == nil || !slices.Equal(b.NotificationIDs, noteIDs(ns)) {
		t.Fatalf("bundle after a stale drawer read = %v, want all ten %v", b, noteIDs(ns))
	}
	if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
		t.Fatal(err)
	}
	if b, err := repo.Peek(ctx, recipient, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("after the dequeue Peek = %v, %v; want nothing", b, err)
	}
}

// A pending bundle read back from a stale replica is read again, never
// answered short or with an error.
func TestPendingBundleIsReadAgainAfterAStaleRead(t *testing.T) {
	repo, store := lagEnv(t, 0, 2)
	recipient := uuid.NewString()
	ns := tenNotes(recipient)
	ctx := context.Background()
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	first, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || first == nil {
		t.Fatalf("Peek = %v, %v", first, err)
	}
	store.lag(2)
	again, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil {
		t.Fatalf("Peek of the pending bundle after a stale read: %v", err)
	}
	if store.served() == 0 {
		t.Fatal("the store served no stale read; the test did not test anything")
	}
	if again == nil || again.ID != first.ID || !slices.Equal(again.NotificationIDs, noteIDs(ns)) {
		t.Fatalf("pending bundle read again = %v, want %v", again, first)
	}
}

// abortedStore lists the drawers of every cabinet without positions
// [from, to), as the Cosmos store does once an aborted save gave them back,
// while its drawers still return the items there: a replica that has not
// yet seen the rollback's deletes.
type abortedStore struct {
	store.Store
	from, to int64
}

func (s abortedStore) LoadRecipient(ctx context.Context, recipient string, opts ...store.LoadOption) (store.RecipientState, error) {
	st, err := s.Store.LoadRecipient(ctx, recipient, opts...)
	for i, e := range st.Entries {
		var runs []drawer.Meta
		for _, d := range e.Drawers {
			if d.Start < s.from {
				runs = append(runs, drawer.Meta{ID: d.ID, Start: d.Start, Count: int(min(d.End(), s.from) - d.Start), FirstSeq: d.FirstSeq})
			}
			if d.End() > s.to {
				start := max(d.Start, s.to)
				runs = append(runs, drawer.Meta{ID: d.ID, Start: start, Count: int(d.End() - start)})
			}
		}
		st.Entries[i].Drawers = runs
	}
	return st, err
}

// What a replica still returns from positions given back is deleted data:
// it is neither delivered nor counted, in a new bundle or a pending one.
func TestPositionsGivenBackAreNeitherDeliveredNorCounted(t *testing.T) {
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	repo := hub.New(abortedStore{Store: inner, from: 3, to: 6}, hub.Options{}, nil)
	t.Cleanup(func() {
		repo.Close()
		_ = inner.Close()
	})
	recipient := uuid.NewString()
	ns := tenNotes(recipient)
	ctx := context.Background()
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	backlog, err := repo.Backlog(ctx, recipient)
	if err != nil || len(backlog.Cabinets) != 1 || backlog.Cabinets[0].Waiting != 7 || backlog.Cabinets[0].Total != 10 {
		t.Fatalf("backlog = %+v, %v; want one cabinet of 10 positions with 7 waiting", backlog, err)
	}
	if tr, err := repo.TraceNotification(ctx, recipient, ns[8].ID); err != nil || tr.State != hub.TraceWaiting || tr.Position != 8 {
		t.Fatalf("trace of the ninth = %+v, %v; want waiting at position 8", tr, err)
	}
	want := noteIDs(slices.Concat(ns[:3], ns[6:]))
	for _, what := range []string{"cut", "pending"} {
		b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
		if err != nil || b == nil || !slices.Equal(b.NotificationIDs, want) {
			t.Fatalf("%s bundle = %v, %v; want the seven outside the hole %v", what, b, err, want)
		}
	}
	// Dequeued, its record names the runs it reads back from.
	b, _ := repo.Peek(ctx, recipient, domain.GroupAll, "")
	if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
		t.Fatal(err)
	}
	if back, err := repo.DequeuedBundle(ctx, recipient, b.ID); err != nil || !slices.Equal(back.NotificationIDs, want) {
		t.Fatalf("dequeued bundle read back = %v, %v; want %v", back, err, want)
	}
}

// stalePeek peeks the recipient's bundle through one stale drawer read.
func stalePeek(t *testing.T, repo *hub.Hub, store *laggingStore, recipient string) *domain.Bundle {
	t.Helper()
	store.lag(1)
	b, err := repo.Peek(context.Background(), recipient, domain.GroupAll, "")
	if err != nil {
		t.Fatal(err)
	}
	if store.served() == 0 {
		t.Fatal("the store served no stale read; the test did not test anything")
	}
	return b
}

// A drawer read that lacks the first waiting notification of a cabinet
// whose drawer is saved (its last sequence number at or below the
// watermark) is stale too: the cabinet is not taken for one whose head is
// above the watermark, and a newer cabinet's notification is not delivered
// before it.
func TestPeekNeverSkipsACabinetWhoseHeadItDidNotRead(t *testing.T) {
	repo, store := lagEnv(t, 1, 2)
	recipient := uuid.NewString()
	note, save := headToRead(t, repo, recipient)
	older, newer := note(domain.OriginTimeSeries, "rsm-012"), note(domain.OriginAggregations, "rsm-014")
	save(older)
	save(newer)

	if b := stalePeek(t, repo, store, recipient); b == nil || !slices.Equal(b.NotificationIDs, []string{older.ID}) {
		t.Fatalf("Peek after a stale read of the older cabinet's head = %v, want the older notification %s before %s", b, older.ID, newer.ID)
	}
}

// A drawer read that lacks a cabinet's saved head and returns a later
// position in its place, one whose sequence number is above the watermark
// (its save is under way), is stale too, not a head that is not written
// yet: the read of all the drawer holds finds the head, and the Peek reads
// again rather than hide the cabinet until the later save ends.
func TestPeekNeverTakesAHeadItDidNotReadForOneNotWrittenYet(t *testing.T) {
	repo, store := lagEnv(t, 1, 2)
	ctx := context.Background()
	recipient := uuid.NewString()
	note, save := headToRead(t, repo, recipient)
	older, newer := note(domain.OriginTimeSeries, "rsm-012"), note(domain.OriginTimeSeries, "rsm-012")
	save(older)
	saved, err := store.Store.LoadRecipient(ctx, recipient)
	if err != nil {
		t.Fatal(err)
	}
	save(newer) // position 2, its save under way
	store.mu.Lock()
	store.watermark = saved.Head.Watermark
	store.mu.Unlock()

	if b := stalePeek(t, repo, store, recipient); b == nil || !slices.Equal(b.NotificationIDs, []string{older.ID}) {
		t.Fatalf("Peek after a stale read of the cabinet's head = %v, want the saved notification %s", b, older.ID)
	}
}

// headToRead leaves the recipient's time series cabinet (rsm-012)
// acknowledged up to position 1, whose sequence number neither its cursor
// (its last bundle ended with the cabinet) nor its drawer (a charges
// cabinet's number is between its own) tells: a Peek reads it. It returns
// how to make and save the recipient's notifications.
func headToRead(t *testing.T, repo *hub.Hub, recipient string) (note func(domain.Origin, string) domain.Notification, save func(...domain.Notification)) {
	t.Helper()
	ctx := context.Background()
	note = func(origin domain.Origin, contentType string) domain.Notification {
		return domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: origin, ContentType: contentType,
			DocumentType: contentType, SupportsBundling: true, Weight: 1}
	}
	save = func(ns ...domain.Notification) {
		t.Helper()
		if _, err := repo.Save(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	save(note(domain.OriginTimeSeries, "rsm-012"), note(domain.OriginCharges, "rsm-033"))
	for _, origin := range []domain.Origin{domain.OriginTimeSeries, domain.OriginCharges} {
		done, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
		if err != nil || done == nil || done.Origin != origin || repo.Dequeue(ctx, recipient, done.ID) != nil {
			t.Fatalf("Peek = %v, %v; want the %v notification, dequeued", done, err, origin)
		}
	}
	return note, save
}
