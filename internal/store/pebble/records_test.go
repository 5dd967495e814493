package pebble

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
)

// openTemp opens a store in a temporary directory.
func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestUnknownRecipientsAreNotKeptInMemory(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	for range 100 {
		st, err := s.LoadRecipient(ctx, uuid.NewString())
		if err != nil || st.Head.Version != "" || len(st.Entries) != 0 {
			t.Fatalf("unknown recipient: %+v %v", st, err)
		}
	}
	if len(s.cache) != 0 {
		t.Fatalf("%d unknown recipients cached", len(s.cache))
	}
	known := uuid.NewString()
	if err := saveIDsFor(t, s, known, []string{uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	st, err := s.LoadRecipient(ctx, known)
	if err != nil || st.Head.Version == "" {
		t.Fatalf("known recipient: %+v %v", st, err)
	}
	if len(s.cache) != 1 {
		t.Fatalf("%d recipients cached, want 1", len(s.cache))
	}
}

// A recipient's state lists entries and cursors by origin, then content
// type, and pending bundles by id, whatever order the maps hold them in.
func TestStateListsRecordsInKeyOrder(t *testing.T) {
	keys := []catalog.Key{
		{Origin: domain.Origin(2), ContentType: "a"}, {Origin: domain.Origin(1), ContentType: "b"},
		{Origin: domain.Origin(1), ContentType: "a"}, {Origin: domain.Origin(3), ContentType: ""},
	}
	rec := &records{
		entries: map[catalog.Key]catalog.Entry{}, cursors: map[catalog.Key]catalog.Cursor{},
		pending: map[string]bundle.Record{},
	}
	for i, k := range keys {
		rec.entries[k] = catalog.Entry{Origin: k.Origin, ContentType: k.ContentType, Total: int64(i)}
		rec.cursors[k] = catalog.Cursor{Origin: k.Origin, ContentType: k.ContentType, Acked: int64(i)}
	}
	for _, id := range []string{"c", "a", "d", "b"} {
		rec.pending[id] = bundle.Record{ID: id}
	}
	for range 20 { // map order differs from one iteration to the next
		st := rec.state()
		var gotEntries, gotCursors []catalog.Key
		for _, e := range st.Entries {
			gotEntries = append(gotEntries, e.Key())
			if e.Total != int64(slices.Index(keys, e.Key())) {
				t.Fatalf("entry %v holds another's value: %+v", e.Key(), e)
			}
		}
		for _, c := range st.Cursors {
			gotCursors = append(gotCursors, c.Key())
		}
		want := slices.SortedFunc(slices.Values(keys), compareKeys)
		if !slices.Equal(gotEntries, want) || !slices.Equal(gotCursors, want) {
			t.Fatalf("entries %v, cursors %v; want both %v", gotEntries, gotCursors, want)
		}
		var ids []string
		for _, b := range st.Pending {
			ids = append(ids, b.ID)
		}
		if !slices.Equal(ids, []string{"a", "b", "c", "d"}) {
			t.Fatalf("pending %v", ids)
		}
	}
	if st := (&records{}).state(); st.Entries != nil || st.Cursors != nil || st.Pending != nil {
		t.Fatalf("empty records: %+v", st)
	}
}
