package embedded

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/repository"
)

// oldFingerprint is the fingerprint versions before xxh3 stored: the first 16
// bytes of a SHA-256 of the content. Written out here to pin that format.
func oldFingerprint(n domain.Notification) [16]byte {
	h := sha256.New()
	var num [8]byte
	for _, s := range []string{n.Recipient, n.ContentType, n.DocumentType} {
		binary.BigEndian.PutUint64(num[:], uint64(len(s)))
		h.Write(num[:])
		h.Write([]byte(s))
	}
	binary.BigEndian.PutUint64(num[:], uint64(n.Origin))
	h.Write(num[:])
	binary.BigEndian.PutUint64(num[:], uint64(n.Weight))
	h.Write(num[:])
	if n.SupportsBundling {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
	}
	return [16]byte(h.Sum(nil)[:16])
}

// Id records written by earlier versions (32 bytes: a SHA-256 fingerprint and
// the drawer) still tell a duplicate from a conflicting save.
func TestIDRecordsOfEarlierVersionsStillFindDuplicates(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	repo := repository.New(s, repository.Options{}, nil)
	ctx := context.Background()
	n := domain.Notification{ID: uuid.NewString(), Recipient: uuid.NewString(), Origin: domain.OriginCharges,
		ContentType: "c", DocumentType: "d", SupportsBundling: true, Weight: 3}
	if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
		t.Fatal(err)
	}
	// Rewrite the id record the way an earlier version wrote it: keyed by
	// the id alone, with a SHA-256 fingerprint. Then start again as after a
	// crash, so the index is built from what is on disk.
	id, err := uuidBytes(n.ID)
	if err != nil {
		t.Fatal(err)
	}
	key, v, ok, err := s.storedID(&id)
	if err != nil || !ok || len(v) != idRecordLen || key[0] != prefixIDByGroup {
		t.Fatalf("id record %x at %x (%v, %v)", v, key, ok, err)
	}
	fp := oldFingerprint(n)
	legacy := append(fp[:], v[len(v)-16:]...)
	if err := s.db.Delete(key, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(idKey(0, &id), legacy, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	repo.Close()
	s = crashAndReopen(t, s, dir)
	repo = repository.New(s, repository.Options{}, nil)
	defer func() { repo.Close(); _ = s.Close() }()

	res, err := repo.Save(ctx, []domain.Notification{n})
	if err != nil || res.Duplicates != 1 || res.Saved != 0 {
		t.Fatalf("saving it again: %+v, %v; want one duplicate", res, err)
	}
	changed := n
	changed.DocumentType = "other"
	if _, err := repo.Save(ctx, []domain.Notification{changed}); !errors.Is(err, domain.ErrNotificationConflict) {
		t.Fatalf("the same id with other content: %v, want a conflict", err)
	}
	recs, err := s.LookupIDs(ctx, []string{n.ID})
	if err != nil || !recs[n.ID].LegacyFingerprint || recs[n.ID].Fingerprint != fp {
		t.Fatalf("lookup: %+v, %v", recs, err)
	}
}
