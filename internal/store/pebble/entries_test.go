package pebble

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// fillDrawers saves n notifications to one cabinet of recipient r through a
// repository, in Saves of at most 10,000.
func fillDrawers(t *testing.T, s *Store, r string, n int) {
	t.Helper()
	repo := hub.New(s, hub.Options{}, nil)
	defer repo.Close()
	for n > 0 {
		k := min(n, 10_000)
		ns := make([]domain.Notification, k)
		for i := range ns {
			ns[i] = domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: domain.OriginTimeSeries,
				ContentType: "ts", DocumentType: "ts", SupportsBundling: true, Weight: 1}
		}
		if _, err := repo.Save(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
		n -= k
	}
}

func loadEntry(t *testing.T, s *Store, r string) catalog.Entry {
	t.Helper()
	st, err := s.LoadRecipient(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Entries) != 1 {
		t.Fatalf("%d entries, want 1", len(st.Entries))
	}
	return st.Entries[0]
}

// storedLayout reads the cabinet's entry value and drawer records as stored.
func storedLayout(t *testing.T, s *Store, r string, k catalog.Key) (inEntry, apart []drawer.Meta) {
	t.Helper()
	rb := [16]byte(uuid.MustParse(r))
	v, ok, err := s.get(cabinetKey(kindEntry, rb, k))
	if err != nil || !ok {
		t.Fatalf("entry not stored: %v", err)
	}
	e, err := decodeEntry(v)
	if err != nil {
		t.Fatal(err)
	}
	prefix := append(recipientPrefix(rb), kindDrawerMeta)
	err = s.scan(prefix, func(_, value []byte) error {
		d, err := decodeDrawerMeta(value)
		apart = append(apart, d)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return e.Drawers, apart
}

func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(s.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkLayout checks that the cabinet's entry stores the last of its drawers
// and the others are records of their own.
func checkLayout(t *testing.T, s *Store, r string, want catalog.Entry) {
	t.Helper()
	n := len(want.Drawers)
	inEntry, apart := storedLayout(t, s, r, want.Key())
	if !reflect.DeepEqual(inEntry, want.Drawers[n-1:]) || !reflect.DeepEqual(apart, want.Drawers[:n-1]) {
		t.Fatalf("stored: in the entry %+v, apart %+v; want the last of %+v in the entry, the others apart", inEntry, apart, want.Drawers)
	}
}

// readBack reopens the store and checks that the recipient's one cabinet
// reads back with want's drawers; it returns the reopened store.
func readBack(t *testing.T, s *Store, r string, want []drawer.Meta) *Store {
	t.Helper()
	s = reopen(t, s)
	if got := loadEntry(t, s, r); !reflect.DeepEqual(got.Drawers, want) {
		t.Fatalf("drawers read back %+v, want %+v", got.Drawers, want)
	}
	return s
}

// A save to a cabinet rewrites its entry: the entry's value holds only the
// last drawer, so what a save writes does not grow with the cabinet.
func TestAnEntryStoresOnlyItsLastDrawer(t *testing.T) {
	s := openTemp(t)
	t.Cleanup(func() { _ = s.Close() }) // the store reopen left last
	r := uuid.NewString()
	fillDrawers(t, s, r, 3*drawer.Capacity+5)
	fillDrawers(t, s, r, 1)
	want := loadEntry(t, s, r)
	if len(want.Drawers) != 4 {
		t.Fatalf("%d drawers, want 4", len(want.Drawers))
	}
	checkLayout(t, s, r, want)
	s = readBack(t, s, r, want.Drawers)
}

// An entry's value holds only its cabinet's last drawer: one that holds more
// is refused as corrupt rather than read with its drawers twice.
func TestAnEntryHoldingEarlierDrawersIsCorrupt(t *testing.T) {
	s := openTemp(t)
	t.Cleanup(func() { _ = s.Close() }) // the store reopen left last
	r := uuid.NewString()
	fillDrawers(t, s, r, drawer.Capacity+5)
	e := loadEntry(t, s, r)
	v, err := encodeEntry(e) // both drawers in the value
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(cabinetKey(kindEntry, [16]byte(uuid.MustParse(r)), e.Key()), v, nil); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	if _, err := s.LoadRecipient(context.Background(), r); !errors.Is(err, errCorrupt) {
		t.Fatalf("an entry holding %d drawers: %v, want corrupt", len(e.Drawers), err)
	}
}

// A sweep that takes drawers out of an entry, or deletes the entry, deletes
// their records too.
func TestSweptDrawersLeaveNoRecords(t *testing.T) {
	s := openTemp(t)
	t.Cleanup(func() { _ = s.Close() }) // the store reopen left last
	ctx := context.Background()
	r := uuid.NewString()
	fillDrawers(t, s, r, 3*drawer.Capacity+5)
	e := loadEntry(t, s, r)
	kept := e
	kept.Drawers = []drawer.Meta{e.Drawers[1], e.Drawers[3]} // one from the middle goes too
	if err := s.ApplySweep(ctx, store.Sweep{Recipient: r, Entries: []catalog.Entry{kept}}); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, s, r, kept)
	s = readBack(t, s, r, kept.Drawers)
	if err := s.ApplySweep(ctx, store.Sweep{Recipient: r, DeleteEntries: []catalog.Entry{loadEntry(t, s, r)}}); err != nil {
		t.Fatal(err)
	}
	rb := [16]byte(uuid.MustParse(r))
	left := 0
	if err := s.scan(append(recipientPrefix(rb), kindDrawerMeta), func(_, _ []byte) error { left++; return nil }); err != nil || left != 0 {
		t.Fatalf("%d drawer records left after the entry was deleted (%v)", left, err)
	}
	s = reopen(t, s)
	if st, err := s.LoadRecipient(ctx, r); err != nil || len(st.Entries) != 0 {
		t.Fatalf("after the entry's deletion: %+v, %v", st.Entries, err)
	}
}
