package storetest

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// Reopen opens a store of the backend under test on the directory a Backup
// wrote; the test closes it.
type Reopen func(t *testing.T, dir string) store.Store

// RunBackup checks Backup's promise (store.Backup). A backend that copies
// itself passes reopen, and the copy must hold every write answered
// before the call and nothing written after it; one that does not
// (reopen nil) must say so with domain.ErrNotSupported and write nothing.
func RunBackup(t *testing.T, newStore Factory, reopen Reopen) {
	run := func(name string, test func(*testing.T, *storeEnv, Reopen)) {
		t.Run(name, func(t *testing.T) {
			test(t, &storeEnv{t: t, store: open(t, newStore), clock: newClock()}, reopen)
		})
	}
	run("BackupHoldsEveryAnsweredWriteOrIsNotSupported", backupHoldsAnsweredWrites)
	run("BackupRefusesADirectoryThatExistsOrIsRelative", backupRefusesBadDirectories)
}

func backupHoldsAnsweredWrites(t *testing.T, s *storeEnv, reopen Reopen) {
	a, b := newRecipient(), newRecipient()
	saved := notes(3, a, domain.OriginCharges, "c")
	s.commit(saved...)
	s.commit(notes(2, b, domain.OriginTimeSeries, "t")...)
	s.create(a, s.record(domain.OriginCharges, "c", 0, 2))
	s.acknowledge(b, s.create(b, s.record(domain.OriginTimeSeries, "t", 0, 1)))
	dir := filepath.Join(t.TempDir(), "copy")
	err := s.store.Backup(ctx(t), dir)
	if reopen == nil {
		if !errors.Is(err, domain.ErrNotSupported) {
			t.Fatalf("Backup of a store that does not copy itself: %v; want domain.ErrNotSupported", err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a refused Backup left %s (%v)", dir, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	// What the copy must hold; a save after the backup must not be in it.
	want := map[string]store.RecipientState{a: s.load(a), b: s.load(b)}
	later := note(a, domain.OriginCharges, "c")
	s.commit(later)

	copied := open(t, func(t *testing.T) store.Store { return reopen(t, dir) })
	for r, want := range want {
		got, err := copied.LoadRecipient(ctx(t), r)
		if err != nil {
			t.Fatal(err)
		}
		if !sameState(got, want) {
			t.Fatalf("recipient %s in the copy:\n%+v\nwant as before the backup:\n%+v", r, got, want)
		}
	}
	found, err := copied.LookupIDs(ctx(t), append(ids(saved), later.ID))
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != len(saved) {
		t.Fatalf("the copy knows %d of the %d ids saved before it, or one saved after it: %v", len(found), len(saved), found)
	}
}

func backupRefusesBadDirectories(t *testing.T, s *storeEnv, reopen Reopen) {
	if reopen == nil {
		t.Skip("the backend does not copy itself")
	}
	s.commit(notes(1, newRecipient(), domain.OriginCharges, "c")...)
	exists := t.TempDir()
	for name, dir := range map[string]string{"an existing directory": exists, "a relative path": "copy"} {
		if err := s.store.Backup(ctx(t), dir); !errors.Is(err, domain.ErrInvalidArgument) {
			t.Errorf("Backup into %s: %v; want domain.ErrInvalidArgument", name, err)
		}
	}
	if entries, err := os.ReadDir(exists); err != nil || len(entries) != 0 {
		t.Fatalf("a refused Backup wrote into %s: %v %v", exists, entries, err)
	}
	if _, err := os.Stat("copy"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused Backup made ./copy (%v)", err)
	}
}

// sameState compares two reads of a recipient's records; times by Equal.
func sameState(a, b store.RecipientState) bool {
	return a.Head == b.Head && reflect.DeepEqual(a.Entries, b.Entries) && reflect.DeepEqual(a.Cursors, b.Cursors) &&
		slices.EqualFunc(a.Pending, b.Pending, sameRecord)
}
