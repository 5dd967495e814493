package pebble

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// saveIDs commits one page of new ids for a fresh recipient.
func saveIDs(t *testing.T, s *Store, ids []string) error {
	t.Helper()
	return saveIDsFor(t, s, uuid.NewString(), ids)
}

// saveIDsFor commits one page of new ids as the first save of recipient.
func saveIDsFor(t *testing.T, s *Store, recipient string, ids []string) error {
	t.Helper()
	d := uuid.NewString()
	save := store.RecipientSave{Recipient: recipient, Head: store.Head{NextSeq: int64(len(ids)) + 1}}
	var page drawer.Page
	page.DrawerID = d
	for i, id := range ids {
		page.Items = append(page.Items, drawer.Item{Pos: int64(i), Seq: int64(i + 1), ID: id, DocumentType: "x", Weight: 1})
		save.IDs = append(save.IDs, store.IDRecord{ID: id, DrawerID: d})
	}
	save.Pages = []drawer.Page{page}
	return s.CommitSaves(context.Background(), []store.RecipientSave{save})
}

func TestIDIndexNeverHidesAStoredID(t *testing.T) {
	old := minIDIndexSlots
	minIDIndexSlots = 8 // force several rebuilds
	t.Cleanup(func() { minIDIndexSlots = old })
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for range 20 {
		ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()}
		if err := saveIDs(t, s, ids); err != nil {
			t.Fatal(err)
		}
		all = append(all, ids...)
	}
	if s.ids.count != len(all) || len(s.ids.slots) < len(all) {
		t.Fatalf("index of %d slots counts %d ids, want %d", len(s.ids.slots), s.ids.count, len(all))
	}
	check := func(s *Store) {
		t.Helper()
		err := saveIDs(t, s, all)
		var exist *store.IDsExistError
		if !errors.As(err, &exist) || len(exist.Records) != len(all) {
			t.Fatalf("re-saving %d stored ids: %v", len(all), err)
		}
		found, err := s.LookupIDs(context.Background(), all)
		if err != nil || len(found) != len(all) {
			t.Fatalf("lookup found %d of %d (%v)", len(found), len(all), err)
		}
	}
	check(s)
	_, last, err := s.groupSpan()
	if err != nil || last == 0 {
		t.Fatalf("last group stored %d (%v)", last, err)
	}
	// After a restart the index is loaded from its file, or rebuilt from
	// disk after a crash; group numbers go on from the last one stored.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	if s.lastGroup != last {
		t.Fatalf("last group %d after a restart, want the last one stored, %d", s.lastGroup, last)
	}
	check(s)
	s = crashAndReopen(t, s, dir)
	defer s.Close()
	if s.ids.count != len(all) {
		t.Fatalf("rebuilt index counts %d ids, want %d", s.ids.count, len(all))
	}
	check(s)
}

// Records are keyed by their write group: every id of one group shares it,
// and the next group has the next number.
func TestAWriteGroupsIDsShareAGroupNumber(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	first := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
	second := []string{uuid.NewString()}
	for _, ids := range [][]string{first, second} {
		if err := saveIDs(t, s, ids); err != nil {
			t.Fatal(err)
		}
	}
	groups := map[string]uint32{}
	err := s.scan([]byte{prefixIDByGroup}, func(key, _ []byte) error {
		g, id, ok := idKeyParts(key)
		if !ok {
			t.Fatalf("key %x", key)
		}
		groups[uuidString(id[:])] = g
		return nil
	})
	if err != nil || len(groups) != 4 {
		t.Fatalf("%d records (%v)", len(groups), err)
	}
	g := groups[first[0]]
	if g == 0 || groups[first[1]] != g || groups[first[2]] != g || groups[second[0]] != g+1 {
		t.Fatalf("groups %v", groups)
	}
}

// Retention takes a swept drawer's ids out of the index, and they can be
// saved again.
func TestSweptIDsLeaveTheIndex(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	ids := []string{uuid.NewString(), uuid.NewString()}
	recipient := uuid.NewString()
	if err := saveIDsFor(t, s, recipient, ids); err != nil {
		t.Fatal(err)
	}
	found, err := s.LookupIDs(ctx, ids)
	if err != nil || len(found) != 2 {
		t.Fatalf("found %v (%v)", found, err)
	}
	if err := s.ApplySweep(ctx, store.Sweep{Recipient: recipient, Drawers: []string{found[ids[0]].DrawerID}}); err != nil {
		t.Fatal(err)
	}
	if s.ids.count != 0 {
		t.Fatalf("index counts %d ids after the sweep", s.ids.count)
	}
	if found, err := s.LookupIDs(ctx, ids); err != nil || len(found) != 0 {
		t.Fatalf("swept ids found: %v (%v)", found, err)
	}
	if err := saveIDs(t, s, ids); err != nil {
		t.Fatalf("saving swept ids again: %v", err)
	}
}

// A clean Close saves the index and the next Open loads it; a store written
// after that load and stopped without Close (a crash) indexes its ids anew
// instead of trusting the file, which no longer describes them.
func TestSavedIDIndexIsUsedOnlyIfNothingWroteSince(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := []string{uuid.NewString(), uuid.NewString()}
	if err := saveIDs(t, s, before); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.get(filterTokenKey); ok {
		t.Fatal("the token of the loaded filter is still stored")
	}
	if s.ids.count != 2 {
		t.Fatalf("loaded index counts %d ids, want 2", s.ids.count)
	}
	after := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
	if err := saveIDs(t, s, after); err != nil {
		t.Fatal(err)
	}
	s = crashAndReopen(t, s, dir)
	defer s.Close()
	if s.ids.count != 5 {
		t.Fatalf("rebuilt index counts %d ids, want 5", s.ids.count)
	}
	for _, id := range append(before, after...) {
		u, _ := uuidBytes(id)
		if _, _, ok, err := s.storedID(&u); !ok || err != nil {
			t.Fatalf("id %s stored before the crash is not found (%v)", id, err)
		}
	}
}

// A saved index that cannot be read at an Open (a read error of its file;
// here the file is moved aside for that Open) is indexed anew, and its
// token goes all the same: the store then takes writes the file does not
// describe, so after a crash, with the file readable again, the next Open
// must not load it.
func TestASavedIDIndexThatCouldNotBeReadIsNotLoadedAfterWritesAndACrash(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := []string{uuid.NewString()}
	if err := saveIDs(t, s, before); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, idIndexFile)
	if err := os.Rename(file, file+".aside"); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	after := []string{uuid.NewString(), uuid.NewString()}
	if err := saveIDs(t, s, after); err != nil {
		t.Fatal(err)
	}
	s.writer.Close() // a crash: nothing saved at Close
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".aside", file); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	found, err := s.LookupIDs(context.Background(), append(before, after...))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range append(before, after...) {
		if _, ok := found[id]; !ok {
			t.Errorf("id %s stored before the crash is not found", id)
		}
	}
	var exists *store.IDsExistError
	if err := saveIDs(t, s, after); !errors.As(err, &exists) {
		t.Fatalf("a save of ids stored before the crash: %v, want them named as existing", err)
	}
}

// crashAndReopen stops s as a crash would (nothing saved at Close) and opens
// its directory again.
func crashAndReopen(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	s.writer.Close()
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The index is mapped outside the Go heap, so Close must give it back; a
// lookup after Close is an error, not a read of memory returned.
func TestCloseReturnsTheIDIndex(t *testing.T) {
	s := openTemp(t)
	id := uuid.NewString()
	if err := saveIDs(t, s, []string{id}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.ids.slots != nil {
		t.Fatal("the id index is still mapped after Close")
	}
	if _, err := s.LookupIDs(context.Background(), []string{id}); !errors.Is(err, pebble.ErrClosed) {
		t.Fatalf("lookup after Close: %v, want pebble.ErrClosed", err)
	}
}
