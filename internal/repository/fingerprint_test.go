package repository

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
)

// A stored fingerprint of an earlier version (SHA-256) is recognised even
// when the store cannot say which hash it holds, as Cosmos documents cannot.
func TestStoredSHA256FingerprintsStillFindDuplicates(t *testing.T) {
	n := domain.Notification{ID: uuid.NewString(), Recipient: uuid.NewString(), Origin: domain.OriginCharges,
		ContentType: "c", DocumentType: "d", SupportsBundling: true, Weight: 2}
	for _, legacyFlag := range []bool{false, true} {
		stored := map[string]IDRecord{n.ID: {ID: n.ID, Fingerprint: legacyFingerprint(n), LegacyFingerprint: legacyFlag}}
		fresh, dups, err := classify([]domain.Notification{n}, stored, map[string]Fingerprint{})
		if err != nil || dups != 1 || len(fresh) != 0 {
			t.Fatalf("flag %v: fresh %d, dups %d, err %v; want one duplicate", legacyFlag, len(fresh), dups, err)
		}
		other := n
		other.Weight = 3
		if _, _, err := classify([]domain.Notification{other}, stored, map[string]Fingerprint{}); !errors.Is(err, domain.ErrNotificationConflict) {
			t.Fatalf("flag %v: other content: %v, want a conflict", legacyFlag, err)
		}
	}
	if fingerprint(n) == legacyFingerprint(n) {
		t.Fatal("the two fingerprints coincide")
	}
}
