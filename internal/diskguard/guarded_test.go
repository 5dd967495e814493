package diskguard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// memStore is a store.Store that keeps nothing and counts the writes that
// reach it. While hold is set, CommitSaves tells entered and waits for it,
// then fails with fail; beyond the entered channel's room it fails at once
// with errTooMany.
type memStore struct {
	store.Store // nil: methods the tests do not call panic

	mu      sync.Mutex
	commits int
	others  int
	hold    chan struct{}
	entered chan struct{}
	inside  int
	fail    error
}

var errTooMany = errors.New("more saves under way than the room holds")

func (m *memStore) CommitSaves(context.Context, []store.RecipientSave) error {
	m.mu.Lock()
	hold, entered := m.hold, m.entered
	if hold != nil {
		if m.inside == cap(entered) {
			m.mu.Unlock()
			return errTooMany
		}
		m.inside++
	}
	m.mu.Unlock()
	if hold != nil {
		entered <- struct{}{}
		<-hold
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.commits++
	return nil
}

func (m *memStore) other() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.others++
	return nil
}

func (m *memStore) CreateBundle(context.Context, string, bundle.Record, catalog.Cursor) error {
	return m.other()
}

func (m *memStore) Acknowledge(context.Context, string, bundle.Record, catalog.Cursor) error {
	return m.other()
}
func (m *memStore) ApplySweep(context.Context, store.Sweep) error       { return m.other() }
func (m *memStore) RemoveNotices(context.Context, []store.Notice) error { return m.other() }
func (m *memStore) HoldSweepLease(context.Context, string, time.Duration) (bool, error) {
	return true, m.other()
}
func (m *memStore) ReleaseSweepLease(context.Context, string) error { return m.other() }
func (m *memStore) AcquireBuild(_ context.Context, _, _, holder string, _ time.Duration) (string, time.Time, error) {
	return holder, time.Time{}, m.other()
}
func (m *memStore) ReleaseBuild(context.Context, string, string, string) error { return m.other() }
func (m *memStore) LoadRecipient(context.Context, string, ...store.LoadOption) (store.RecipientState, error) {
	return store.RecipientState{}, nil
}

func (m *memStore) ReadDrawer(context.Context, string, int64, int64, int) ([]drawer.Item, error) {
	return nil, nil
}

func (m *memStore) LookupIDs(context.Context, []string) (map[string]store.IDRecord, error) {
	return nil, nil
}

func (m *memStore) Notices(context.Context, []domain.Origin, int) ([]store.Notice, error) {
	return nil, nil
}

// aSave is one recipient's save of n new notifications, as the hub plans it.
func aSave(n int) []store.RecipientSave {
	const drawerID = "6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f"
	s := store.RecipientSave{
		Recipient: "0b9a8c7d-6e5f-4a3b-9c2d-1e0f9a8b7c6d",
		Entries:   []catalog.Entry{{Origin: domain.OriginCharges, ContentType: "c", Drawers: []drawer.Meta{{ID: drawerID}}}},
		Pages:     []drawer.Page{{DrawerID: drawerID}},
	}
	for i := range n {
		id := fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
		s.Pages[0].Items = append(s.Pages[0].Items, drawer.Item{Pos: int64(i), Seq: int64(i), ID: id, DocumentType: "d", Weight: 1})
		s.IDs = append(s.IDs, store.IDRecord{ID: id, DrawerID: drawerID})
	}
	return []store.RecipientSave{s}
}

// otherWrites makes every write but a save, and says which were refused.
func otherWrites(ctx context.Context, s store.Store) (refused []string) {
	for name, err := range map[string]error{
		"CreateBundle":      s.CreateBundle(ctx, "r", bundle.Record{ID: "b"}, catalog.Cursor{}),
		"Acknowledge":       s.Acknowledge(ctx, "r", bundle.Record{ID: "b"}, catalog.Cursor{}),
		"ApplySweep":        s.ApplySweep(ctx, store.Sweep{Recipient: "r"}),
		"RemoveNotices":     s.RemoveNotices(ctx, []store.Notice{{Recipient: "r", BundleID: "b"}}),
		"HoldSweepLease":    func() error { _, err := s.HoldSweepLease(ctx, "h", time.Minute); return err }(),
		"ReleaseSweepLease": s.ReleaseSweepLease(ctx, "h"),
		"AcquireBuild":      func() error { _, _, err := s.AcquireBuild(ctx, "r", "b", "h", time.Minute); return err }(),
		"ReleaseBuild":      s.ReleaseBuild(ctx, "r", "b", "h"),
	} {
		if errors.Is(err, domain.ErrStorageFull) {
			refused = append(refused, name)
		} else if err != nil {
			panic(name + ": " + err.Error())
		}
	}
	return refused
}

// reads makes every read the tests' store answers; none may be refused.
func reads(ctx context.Context, t *testing.T, s store.Store) {
	t.Helper()
	if _, err := s.LoadRecipient(ctx, "r"); err != nil {
		t.Errorf("LoadRecipient: %v", err)
	}
	if _, err := s.ReadDrawer(ctx, "d", 0, 1, 1); err != nil {
		t.Errorf("ReadDrawer: %v", err)
	}
	if _, err := s.LookupIDs(ctx, []string{"i"}); err != nil {
		t.Errorf("LookupIDs: %v", err)
	}
	if _, err := s.Notices(ctx, nil, 1); err != nil {
		t.Errorf("Notices: %v", err)
	}
}

func TestASaveIsEstimatedAtSeveralTimesWhatItHolds(t *testing.T) {
	one, thousand := SaveBytes(aSave(1)), SaveBytes(aSave(1000))
	perNotification := (thousand - one) / 999
	// A notification's item and id record: (24+36+1) + (32+36+36+16) bytes,
	// three times.
	if perNotification != 543 {
		t.Fatalf("a notification is estimated at %d bytes, want 543", perNotification)
	}
	if one < perNotification+3*(32+32+1+32+36+48+36) {
		t.Fatalf("a save of one notification is estimated at %d bytes: less than its head, entry and page", one)
	}
}

// Between two looks, saves take their estimated bytes from the last look's
// free space: once the next would leave less than the reserve it is
// refused, without a look; the other writes go on down to the floor. The
// next look tells what is really left.
func TestSavesBetweenTwoLooksAreRefusedOnceTheirBytesWouldCrossTheReserve(t *testing.T) {
	const reserve, room = 64 << 20, 10 << 20
	v := &volume{}
	v.free.Store(reserve + room)
	g := New("/data", reserve, v.read, time.Hour, nil)
	defer g.Close()
	next := &memStore{}
	s := Store(next, g)
	ctx := context.Background()
	save := aSave(1000)
	fit := int(room / SaveBytes(save))
	if fit < 5 {
		t.Fatalf("only %d saves fit: the test needs more", fit)
	}
	accepted := 0
	var err error
	for range 10 * fit {
		if err = s.CommitSaves(ctx, save); err != nil {
			break
		}
		accepted++
	}
	if accepted != fit || next.commits != fit {
		t.Fatalf("%d saves accepted (%d reached the store) before one was refused; want %d", accepted, next.commits, fit)
	}
	if !errors.Is(err, domain.ErrStorageFull) || !strings.Contains(err.Error(), "--min-free-disk") || !strings.Contains(err.Error(), "written") {
		t.Fatalf("the save that would cross the reserve: %v", err)
	}
	if got, want := g.Available(), uint64(reserve+room)-uint64(fit)*SaveBytes(save); got != want {
		t.Fatalf("estimated free space %d, want %d", got, want)
	}
	if refused := otherWrites(ctx, s); len(refused) > 0 {
		t.Fatalf("above the floor, %v were refused", refused)
	}
	reads(ctx, t, s)

	// The look finds that the saves took less than estimated: saves go on.
	v.free.Store(reserve + room/2)
	g.Refresh()
	if err := s.CommitSaves(ctx, save); err != nil {
		t.Fatalf("a save once the look found room: %v", err)
	}
	// The volume really is below the reserve: the look says so.
	v.free.Store(reserve - 1)
	g.Refresh()
	if err := s.CommitSaves(ctx, save); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("a save below the reserve: %v", err)
	}
	// Space is freed: the next look lets saves through.
	v.free.Store(reserve + room)
	g.Refresh()
	if err := s.CommitSaves(ctx, save); err != nil {
		t.Fatalf("a save once space was freed: %v", err)
	}
}

// Saves being written hold their bytes: with as many under way as fit, one
// more is refused. When they fail their bytes come back at once; when they
// succeed they stay counted until a look.
func TestSavesUnderWayHoldTheirBytes(t *testing.T) {
	const reserve = 64 << 20
	save := aSave(1000)
	const fit = 4
	v := &volume{}
	v.free.Store(reserve + fit*SaveBytes(save) + SaveBytes(save)/2)
	g := New("/data", reserve, v.read, time.Hour, nil)
	defer g.Close()
	next := &memStore{hold: make(chan struct{}), entered: make(chan struct{}, fit)}
	s := Store(next, g)
	ctx := context.Background()

	underWay := func(fail error) []error {
		next.mu.Lock()
		next.hold, next.fail = make(chan struct{}), fail
		next.mu.Unlock()
		errs := make([]error, fit)
		var wg sync.WaitGroup
		for i := range fit {
			wg.Go(func() { errs[i] = s.CommitSaves(ctx, save) })
		}
		for range fit {
			<-next.entered
		}
		if err := s.CommitSaves(ctx, save); !errors.Is(err, domain.ErrStorageFull) {
			t.Fatalf("a save while %d fill the room: %v; want ErrStorageFull", fit, err)
		}
		next.mu.Lock()
		close(next.hold)
		next.hold, next.inside = nil, 0
		next.mu.Unlock()
		wg.Wait()
		next.mu.Lock()
		next.fail = nil
		next.mu.Unlock()
		return errs
	}

	for _, err := range underWay(store.ErrConflict) {
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a save under way: %v", err)
		}
	}
	if err := s.CommitSaves(ctx, save); err != nil {
		t.Fatalf("a save once those under way failed, writing nothing: %v", err)
	}
	g.Refresh()
	for _, err := range underWay(nil) {
		if err != nil {
			t.Fatalf("a save under way: %v", err)
		}
	}
	if err := s.CommitSaves(ctx, save); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("a save after the room was written, before a look: %v; want ErrStorageFull", err)
	}
	g.Refresh() // the volume has as much free as before: the saves took nothing, after all
	if err := s.CommitSaves(ctx, save); err != nil {
		t.Fatalf("a save once the look found room: %v", err)
	}
}

// Below the floor every write is refused, whether the look measured it or
// what was written since takes the estimate there; reads pass.
func TestBelowTheFloorEveryWriteIsRefusedAndReadsPass(t *testing.T) {
	const reserve = 64 << 20
	v := &volume{}
	v.free.Store(reserve/2 - 1)
	g := New("/data", reserve, v.read, time.Hour, nil)
	defer g.Close()
	next := &memStore{}
	s := Store(next, g)
	ctx := context.Background()
	if refused := otherWrites(ctx, s); len(refused) != 8 {
		t.Fatalf("below the floor only %v were refused, want all 8", refused)
	}
	if err := s.CommitSaves(ctx, aSave(1)); !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("a save below the floor: %v", err)
	}
	reads(ctx, t, s)
	if next.commits+next.others != 0 {
		t.Fatalf("%d writes reached the store below the floor", next.commits+next.others)
	}

	// Just above the floor, writes since the last look take it below.
	v.free.Store(reserve/2 + 1<<20)
	g.Refresh()
	if refused := otherWrites(ctx, s); len(refused) > 0 {
		t.Fatalf("above the floor, %v were refused", refused)
	}
	for i := 0; len(otherWrites(ctx, s)) < 8; i++ {
		if i > 1<<15 {
			t.Fatal("writes above the floor are never refused")
		}
	}
	if avail := g.Available(); avail < g.Floor() || avail-g.Floor() > 3*recordBytes {
		t.Fatalf("every write is refused with %d bytes estimated free, %d above the floor; want within a small write of it", avail, avail-g.Floor())
	}
	reads(ctx, t, s)
}

// memDocuments stores nothing; every document is accepted.
type memDocuments struct{ content.Store }

func (memDocuments) Create(context.Context, content.Key, string) (content.Staged, error) {
	return discard{}, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) Commit() error               { return nil }
func (discard) Abort()                      {}

// Documents built at once count their bytes as they are staged: together
// they cannot take more than the room above the reserve, however their
// writes interleave.
func TestDocumentsBuiltAtOnceAreRefusedOnceTheirBytesWouldCrossTheReserve(t *testing.T) {
	const reserve, room, builds, chunk = 1 << 30, 20 << 20, 8, 64 << 10
	const size = 5 << 20 // 8 of them need twice the room
	v := &volume{}
	v.free.Store(reserve + room)
	g := New("/data", reserve, v.read, time.Hour, nil)
	defer g.Close()
	docs := Documents(memDocuments{}, g)
	ctx := context.Background()

	var mu sync.Mutex
	var staged, refused, complete int
	var wg sync.WaitGroup
	buf := make([]byte, chunk)
	for b := range builds {
		wg.Go(func() {
			doc, err := docs.Create(ctx, content.Key{Recipient: "r", BundleID: fmt.Sprint(b)}, "application/xml")
			if err != nil {
				if !errors.Is(err, domain.ErrStorageFull) {
					t.Errorf("create: %v", err)
				}
				mu.Lock()
				refused++
				mu.Unlock()
				return
			}
			defer doc.Abort()
			for range size / chunk {
				if _, err := doc.Write(buf); err != nil {
					if !errors.Is(err, domain.ErrStorageFull) {
						t.Errorf("write: %v", err)
					}
					mu.Lock()
					refused++
					mu.Unlock()
					return
				}
				mu.Lock()
				staged += chunk
				mu.Unlock()
			}
			mu.Lock()
			complete++
			mu.Unlock()
		})
	}
	wg.Wait()
	if staged > room || staged < room-builds*(chunk+documentBytes) {
		t.Fatalf("%d bytes staged with %d of room", staged, room)
	}
	// How many complete depends on how the builds' writes interleave (all
	// eight may share the room and none finish): only the bound is certain.
	if refused != builds-complete || complete > room/size {
		t.Fatalf("%d documents complete, %d refused; want at most %d complete, the rest refused", complete, refused, room/size)
	}
	doc, err := docs.Create(ctx, content.Key{Recipient: "r", BundleID: "next"}, "application/xml")
	if err == nil {
		_, err = doc.Write(buf)
	}
	if !errors.Is(err, domain.ErrStorageFull) {
		t.Fatalf("a new document before the next look: %v", err)
	}

	g.Refresh() // the refused builds were aborted: the look finds the room again
	doc, err = docs.Create(ctx, content.Key{Recipient: "r", BundleID: "next"}, "application/xml")
	if err != nil {
		t.Fatalf("a new document once the look found room: %v", err)
	}
	if _, err := doc.Write(make([]byte, size)); err != nil {
		t.Fatalf("writing it: %v", err)
	}
}
