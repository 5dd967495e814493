package pebble

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/figures"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/telemetry"
)

// An idle recipient's records leave memory after two eviction rounds without
// use, and come back from disk, unchanged, on its next use.
func TestIdleRecipientsLeaveMemory(t *testing.T) {
	s := openTemp(t)
	repo := hub.New(s, hub.Options{}, nil)
	defer func() { repo.Close(); _ = s.Close() }()
	ctx := context.Background()
	idle, busy := uuid.NewString(), uuid.NewString()
	for _, r := range []string{idle, busy} {
		n := domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: domain.OriginCharges, ContentType: "c", DocumentType: "d", Weight: 1}
		if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := s.LoadRecipient(ctx, idle)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.evictIdle(); n != 0 {
		t.Fatalf("first round evicted %d recipients just used", n)
	}
	if _, err := s.LoadRecipient(ctx, busy); err != nil {
		t.Fatal(err)
	}
	if n := s.evictIdle(); n != 1 {
		t.Fatalf("second round evicted %d recipients, want the idle one", n)
	}
	if rb, ri := uuidOf(t, busy), uuidOf(t, idle); s.cached(rb) == nil || s.peekCache(ri) != nil {
		t.Fatalf("after eviction: busy cached %v, idle cached %v", s.cached(rb) != nil, s.peekCache(ri) != nil)
	}
	after, err := s.LoadRecipient(ctx, idle)
	if err != nil || after.Head != before.Head || len(after.Entries) != 1 || after.Entries[0].Version != before.Entries[0].Version {
		t.Fatalf("reloaded %+v (%v), want %+v", after, err, before)
	}
	if s.peekCache(uuidOf(t, idle)) == nil {
		t.Fatal("a reloaded recipient is not cached again")
	}
}

func uuidOf(t *testing.T, s string) [16]byte {
	t.Helper()
	b, err := uuidBytes(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The backlog figures' keeper recounts every recipient every few seconds on
// the embedded store (telemetry.DefaultBacklogInterval, a quarter of an
// eviction round): its reads must not count as uses, or no recipient it
// counts would ever leave memory.
func TestRecountsOfTheFiguresKeepNoRecipientInMemory(t *testing.T) {
	s := openTemp(t)
	repo := hub.New(s, hub.Options{}, nil)
	defer func() { repo.Close(); _ = s.Close() }()
	ctx := context.Background()
	idle := uuid.NewString()
	n := domain.Notification{ID: uuid.NewString(), Recipient: idle, Origin: domain.OriginCharges, ContentType: "c", DocumentType: "d", Weight: 1}
	if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	keeper := figures.New(s, figures.Options{Every: telemetry.DefaultBacklogInterval, Now: func() time.Time { return now }})
	for round := range 3 {
		for range evictEvery / telemetry.DefaultBacklogInterval {
			if _, err := keeper.Turn(ctx); err != nil {
				t.Fatal(err)
			}
			now = now.Add(telemetry.DefaultBacklogInterval)
		}
		s.evictIdle()
		if round > 0 && s.peekCache(uuidOf(t, idle)) != nil {
			t.Fatalf("an idle recipient is still in memory after %d eviction rounds of recounts alone", round+1)
		}
	}
	f, err := s.ReadFigures(ctx, store.FigureTotals)
	if err != nil || f.Backlog.Recipients != 1 {
		t.Fatalf("figures %+v (%v): the recounts did not count the idle recipient's notification", f, err)
	}
}

// A write group is in pebble, where a read from disk finds it, before its
// fsync ends, which a slow or stalled disk can hold for longer than two
// eviction rounds. The recipient's records must stay in memory meanwhile: a
// load from disk would serve (and keep) a save that is not acknowledged, and
// that a crash loses, to the peeks.
func TestEvictionKeepsTheRecordsOfAWriteNotYetDurable(t *testing.T) {
	s, r := withOneSaved(t)
	ctx := context.Background()
	before, err := s.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	d, id := uuid.NewString(), uuid.NewString()
	later := store.RecipientSave{Recipient: r, Head: store.Head{NextSeq: before.Head.NextSeq + 1, Watermark: before.Head.NextSeq, Version: before.Head.Version},
		Pages: []drawer.Page{{DrawerID: d, Items: []drawer.Item{{Pos: 0, Seq: before.Head.NextSeq, ID: id, DocumentType: "x", Weight: 1}}}},
		IDs:   []store.IDRecord{{ID: id, DrawerID: d}}}
	group, errs := queueWrites(s, func() error { return s.CommitSaves(ctx, []store.RecipientSave{later}) })
	finish := s.applyGroup(group) // in pebble; its fsync has not ended
	s.evictIdle()
	s.evictIdle()
	during, err := s.LoadRecipient(ctx, r)
	if err != nil || during.Head != before.Head {
		t.Fatalf("while the save is not durable a load reads head %+v (%v), want %+v", during.Head, err, before.Head)
	}
	finish()
	if err := <-errs[0]; err != nil {
		t.Fatal(err)
	}
	after, err := s.LoadRecipient(ctx, r)
	if err != nil || after.Head.Watermark != later.Head.Watermark {
		t.Fatalf("once the save is durable a load reads head %+v (%v), want watermark %d", after.Head, err, later.Head.Watermark)
	}
}

// The same for a dequeue: until it is durable, its bundle is pending to
// the peeks, and its notice is not in the outbox (a domain told of it
// would be told of a dequeue that a crash undoes).
func TestEvictionKeepsABundlePendingUntilItsDequeueIsDurable(t *testing.T) {
	s, r := withOneSaved(t)
	ctx := context.Background()
	done, acked := dequeueOfOne(t, s, r)
	group, errs := queueWrites(s, func() error { return s.Acknowledge(ctx, r, done, acked) })
	finish := s.applyGroup(group) // in pebble; its fsync has not ended
	s.evictIdle()
	s.evictIdle()
	notices, err := s.Notices(ctx, domain.Origins, 10)
	if err != nil || len(notices) != 0 {
		t.Fatalf("before the dequeue is durable the outbox holds %+v (%v), want nothing", notices, err)
	}
	if st, err := s.LoadRecipient(ctx, r); err != nil || len(st.Pending) != 1 {
		t.Fatalf("before the dequeue is durable a load has pending %+v (%v), want the bundle", st.Pending, err)
	}
	finish()
	if err := <-errs[0]; err != nil {
		t.Fatal(err)
	}
	if st, err := s.LoadRecipient(ctx, r); err != nil || len(st.Pending) != 0 {
		t.Fatalf("once the dequeue is durable a load has pending %+v (%v), want none", st.Pending, err)
	}
}
