package embedded

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/repository"
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
	save := repository.RecipientSave{Recipient: recipient, Head: repository.Head{NextSeq: int64(len(ids)) + 1}}
	var page drawer.Page
	page.DrawerID = d
	for i, id := range ids {
		page.Items = append(page.Items, drawer.Item{Pos: int64(i), Seq: int64(i + 1), ID: id, DocumentType: "x", Weight: 1})
		save.IDs = append(save.IDs, repository.IDRecord{ID: id, DrawerID: d})
	}
	save.Pages = []drawer.Page{page}
	return s.CommitSaves(context.Background(), []repository.RecipientSave{save})
}

func TestIDFilterNeverHidesAStoredID(t *testing.T) {
	old := minIDFilterCapacity
	minIDFilterCapacity = 8 // force several rebuilds
	t.Cleanup(func() { minIDFilterCapacity = old })
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
	if s.ids.capacity < uint(len(all)) {
		t.Fatalf("filter of capacity %d holds %d ids", s.ids.capacity, len(all))
	}
	check := func(s *Store) {
		t.Helper()
		err := saveIDs(t, s, all)
		var exist *repository.IDsExistError
		if !errors.As(err, &exist) || len(exist.Records) != len(all) {
			t.Fatalf("re-saving %d stored ids: %v", len(all), err)
		}
	}
	check(s)
	// After a restart the filter is rebuilt from disk.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s)
}

// A clean Close saves the filter and the next Open loads it; a store written
// after that load and stopped without Close (a crash) indexes its ids anew
// instead of trusting the file, which no longer describes them.
func TestSavedIDFilterIsUsedOnlyIfNothingWroteSince(t *testing.T) {
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
		t.Fatalf("loaded filter counts %d ids, want 2", s.ids.count)
	}
	after := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
	if err := saveIDs(t, s, after); err != nil {
		t.Fatal(err)
	}
	// Stop as a crash would: no filter saved.
	s.writer.Close()
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range append(before, after...) {
		u, _ := uuidBytes(id)
		if !s.ids.mayExist(idKey(u)) {
			t.Fatalf("id %s stored before the crash is not in the filter", id)
		}
	}
}
