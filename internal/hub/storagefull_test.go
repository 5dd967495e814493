package hub_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// heldStore holds the first CommitSaves of recipient first until release
// is closed, so that the Saves made meanwhile queue into one group.
type heldStore struct {
	store.Store
	first   string
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (s *heldStore) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	for _, rs := range saves {
		if rs.Recipient == s.first {
			s.once.Do(func() { close(s.held); <-s.release })
		}
	}
	return s.Store.CommitSaves(ctx, saves)
}

// A Save too large for the room the disk guard leaves above its reserve is
// refused alone: a small Save that shares its group commit, and fits, is
// stored, as it would be in a group of its own. Without that, the large
// Save's refusal (RESOURCE_EXHAUSTED) was every Save's of its group.
func TestASaveTheDiskGuardRefusesFailsAloneInItsGroupCommit(t *testing.T) {
	dir := t.TempDir()
	inner, err := pebble.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 256 KiB above the reserve: a Save of one notification takes about
	// 1 KB of it, one of 10,000 about 5 MB.
	const reserve, room = 1 << 30, 256 << 10
	guard := diskguard.New(dir, reserve, func(string) (uint64, error) { return reserve + room, nil }, time.Hour, nil)
	held := &heldStore{Store: diskguard.Store(inner, guard), first: uuid.NewString(), held: make(chan struct{}), release: make(chan struct{})}
	h := hub.New(held, hub.Options{SweepInterval: time.Hour}, nil)
	t.Cleanup(func() {
		h.Close()
		guard.Close()
		_ = inner.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	notes := func(recipient string, n int) []domain.Notification {
		ns := make([]domain.Notification, n)
		for i := range ns {
			ns[i] = domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges,
				ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: 1}
		}
		return ns
	}
	type outcome struct {
		recipient string
		err       error
	}
	outcomes := make(chan outcome, 3)
	save := func(recipient string, n int) {
		_, err := h.Save(ctx, notes(recipient, n))
		outcomes <- outcome{recipient, err}
	}
	large, small := uuid.NewString(), uuid.NewString()
	go save(held.first, 1)
	select {
	case <-held.held:
	case o := <-outcomes:
		t.Fatalf("the first Save ended before its commit was held: %v", o.err)
	}
	go save(large, domain.MaxNotificationsPerSave)
	go save(small, 1)
	// Both queue behind the held group: the next group takes them together.
	for deadline := time.Now().Add(time.Minute); h.QueuedSaves() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(held.release)
			t.Fatalf("%d Saves queued behind the held group after a minute, want 2", h.QueuedSaves())
		}
	}
	close(held.release)
	for range 3 {
		o := <-outcomes
		switch o.recipient {
		case large:
			if !errors.Is(o.err, domain.ErrStorageFull) {
				t.Errorf("the Save of %d notifications: %v, want the disk guard's refusal", domain.MaxNotificationsPerSave, o.err)
			}
		default:
			if o.err != nil {
				t.Errorf("a Save of one notification that fits: %v", o.err)
			}
		}
	}
	for r, want := range map[string]bool{held.first: true, small: true, large: false} {
		b, err := h.Peek(ctx, r, domain.GroupAll, "")
		if err != nil || (b != nil) != want {
			t.Fatalf("recipient's Save stored = %v, want %v (%v)", b != nil, want, err)
		}
	}
}
