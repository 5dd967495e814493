package pebble

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/hub"
)

// putUnindexed writes the records of the recipient's dequeued bundles as a
// store of unindexedVersion does: the record and its key in the retention
// index of all recipients, nothing else.
func putUnindexed(t *testing.T, s *Store, recipient string, recs []bundle.Record) {
	t.Helper()
	putRecords(t, s, recipient, recs, func(rec bundle.Record, r, id [16]byte) ([]put, error) {
		return []put{{key: retainedKey(rec, r, id), value: []byte{}}}, nil
	})
	if err := s.db.Set(formatVersionKey, binary.AppendUvarint(nil, unindexedVersion), pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// sortedIDs lists the bundles' ids in order.
func sortedIDs(recs ...bundle.Record) []string {
	var ids []string
	for _, b := range recs {
		ids = append(ids, b.ID)
	}
	slices.Sort(ids)
	return ids
}

// indexKeys counts the keys of the recipients' retention indexes and of
// the drawers' one.
func (s *Store) indexKeys(t *testing.T) (byRecipient, byDrawer int) {
	t.Helper()
	if err := s.scan([]byte{prefixRetainedBy}, func(_, _ []byte) error { byRecipient++; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.scan([]byte{prefixNamedBy}, func(_, _ []byte) error { byDrawer++; return nil }); err != nil {
		t.Fatal(err)
	}
	return byRecipient, byDrawer
}

// A store of the format before the recipients' retention indexes is
// served read-only as it is, and opened for writing is migrated: every
// dequeued or released bundle gets its keys, a migration done again (cut
// short before its version was written) changes nothing, and retention
// then reads only what is due or new and sweeps it, its keys with it.
func TestAStoreOfTheFormatBeforeTheRetentionIndexesIsMigrated(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	dueBefore, since := now.Add(-7*24*time.Hour), now.Add(-time.Minute)
	r := uuid.NewString()
	shared, alone := uuid.NewString(), uuid.NewString()
	due := dequeuedRecord(0, dueBefore.Add(-time.Hour), shared)
	dueAlone := dequeuedRecord(1, dueBefore.Add(-time.Hour), alone)
	between := dequeuedRecord(2, dueBefore.Add(time.Hour), shared)
	released := dequeuedRecord(3, time.Time{}, uuid.NewString())
	released.State, released.ReleasedAt = bundle.Released, dueBefore.Add(2*time.Hour)
	fresh := dequeuedRecord(4, since.Add(time.Second), uuid.NewString())
	putUnindexed(t, s, r, []bundle.Record{due, dueAlone, between, released, fresh})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	check := func(s *Store) {
		t.Helper()
		st, err := s.LoadRetention(ctx, r, dueBefore, since)
		if err != nil {
			t.Fatal(err)
		}
		if ids, want := sortedIDs(st.Bundles...), sortedIDs(due, dueAlone, fresh); !slices.Equal(ids, want) {
			t.Fatalf("bundles read %v, want the due ones and the new one %v", ids, want)
		}
		if len(st.Kept) != 1 || !slices.Equal(st.Kept[0].Drawers, []string{alone}) {
			t.Fatalf("kept %v, want the drawer only a due bundle names, %s", st.Kept, alone)
		}
	}
	ro, err := OpenWith(dir, nil, Options{ReadOnly: errors.New("read-only for the test")})
	if err != nil {
		t.Fatal(err)
	}
	check(ro)
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	for range 2 { // the second time as after a migration cut short
		s, err = Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if v, _, err := s.get(formatVersionKey); err != nil || string(v) != string(binary.AppendUvarint(nil, formatVersion)) {
			t.Fatalf("format version after the migration: %x (%v), want %d", v, err, formatVersion)
		}
		if byRecipient, byDrawer := s.indexKeys(t); byRecipient != 5 || byDrawer != 4 {
			t.Fatalf("%d keys in the recipients' retention indexes, %d in the drawers', want 5 and 4", byRecipient, byDrawer)
		}
		check(s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		setRaw(t, dir, map[string][]byte{string(formatVersionKey): binary.AppendUvarint(nil, unindexedVersion)})
	}

	s, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	later := now.Add(30 * time.Minute) // due and dueAlone are due, between not yet
	repo := hub.New(s, hub.Options{Now: func() time.Time { return later }, Retention: 7 * 24 * time.Hour, SweepInterval: time.Hour}, nil)
	t.Cleanup(repo.Close)
	if err := repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	left, err := s.DequeuedBundles(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if ids, want := sortedIDs(left...), sortedIDs(between, released, fresh); !slices.Equal(ids, want) {
		t.Fatalf("bundles left after the sweep %v, want those not due %v", ids, want)
	}
	if byRecipient, byDrawer := s.indexKeys(t); byRecipient != 3 || byDrawer != 2 {
		t.Fatalf("%d keys left in the recipients' retention indexes, %d in the drawers', want 3 and 2", byRecipient, byDrawer)
	}
	if n := s.retainedKeys(t); n != 3 {
		t.Fatalf("%d keys left in the retention index, want 3", n)
	}
}
