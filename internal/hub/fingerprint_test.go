package hub

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// A stored id is a duplicate when its record holds the notification's
// fingerprint, and a conflict when it holds any other: the fingerprint is
// the only thing compared.
func TestStoredIDsAreJudgedByTheirFingerprint(t *testing.T) {
	n := domain.Notification{ID: uuid.NewString(), Recipient: uuid.NewString(), Origin: domain.OriginCharges,
		ContentType: "c", DocumentType: "d", SupportsBundling: true, Weight: 2}
	same := map[string]store.IDRecord{n.ID: {ID: n.ID, Fingerprint: fingerprint(n)}}
	if fresh, dups, err := classify([]domain.Notification{n}, same, map[string]store.Fingerprint{}); err != nil || dups != 1 || len(fresh) != 0 {
		t.Fatalf("same fingerprint: fresh %d, dups %d, err %v; want one duplicate", len(fresh), dups, err)
	}
	other := n
	other.Weight = 3
	if fingerprint(other) == fingerprint(n) {
		t.Fatal("another weight has the same fingerprint")
	}
	differs := map[string]store.IDRecord{n.ID: {ID: n.ID, Fingerprint: fingerprint(other)}}
	if _, _, err := classify([]domain.Notification{n}, differs, map[string]store.Fingerprint{}); !errors.Is(err, domain.ErrNotificationConflict) {
		t.Fatalf("another fingerprint: %v, want a conflict", err)
	}
}
