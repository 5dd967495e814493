package pebble

import (
	"encoding/binary"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"
)

// setRaw changes the keys of the closed store in dir through pebble itself:
// a value to set, or nil to delete.
func setRaw(t *testing.T, dir string, changes map[string][]byte) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: &pebbleLogger{l: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range changes {
		if v == nil {
			err = db.Delete([]byte(k), pebble.Sync)
		} else {
			err = db.Set([]byte(k), v, pebble.Sync)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// openRefused opens dir and wants it refused with a message holding every
// one of want.
func openRefused(t *testing.T, dir string, want ...string) {
	t.Helper()
	s, err := Open(dir, nil)
	if err == nil {
		_ = s.Close()
		t.Fatalf("opened; want it refused with %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("refused with %q; want it to say %q", err, w)
		}
	}
}

// A new store records the format version; a store whose version is another
// (a later build's) or unreadable is refused with a message that names the
// version found and the one this build reads, and opens again once its
// version is this build's.
func TestAStoreOfAnotherFormatVersionIsRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.get(formatVersionKey); err != nil || !ok || string(v) != string(binary.AppendUvarint(nil, formatVersion)) {
		t.Fatalf("format version stored: %x, %v (%v); want %d", v, ok, err, formatVersion)
	}
	id := uuid.NewString()
	if err := saveIDs(t, s, []string{id}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	setRaw(t, dir, map[string][]byte{string(formatVersionKey): binary.AppendUvarint(nil, 99)})
	openRefused(t, dir, "format version 99", "this build reads format version 4")
	setRaw(t, dir, map[string][]byte{string(formatVersionKey): {0xff}})
	openRefused(t, dir, "(ff)", "this build reads format version 4")

	setRaw(t, dir, map[string][]byte{string(formatVersionKey): binary.AppendUvarint(nil, formatVersion)})
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatalf("the store back at this build's version: %v", err)
	}
	defer s.Close()
	u, _ := uuidBytes(id)
	if _, _, ok, err := s.storedID(&u); !ok || err != nil {
		t.Fatalf("the id saved before is not found (%v)", err)
	}
}

// A store holding data but no format version was not written by this build
// and is refused; an empty one, whose creation stopped before its first
// write, is taken as new and gets this build's version.
func TestAStoreWithoutAFormatVersionIsRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := saveIDs(t, s, []string{uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	setRaw(t, dir, map[string][]byte{string(formatVersionKey): nil})
	openRefused(t, dir, "without a format version", "this build reads format version 4")

	empty := t.TempDir()
	setRaw(t, empty, nil)
	s, err = Open(empty, nil)
	if err != nil {
		t.Fatalf("an empty store: %v", err)
	}
	defer s.Close()
	if _, ok, err := s.get(formatVersionKey); err != nil || !ok {
		t.Fatalf("an empty store opened without getting the format version (%v)", err)
	}
}
