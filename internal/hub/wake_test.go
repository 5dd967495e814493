package hub_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// newWakeHub is a hub over a fresh embedded store, closed with the test,
// once it follows the bells: the first read of them wakes every waiter
// registered before it.
func newWakeHub(t *testing.T, opts hub.Options) *hub.Hub {
	t.Helper()
	st, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(st, opts, nil)
	t.Cleanup(func() {
		h.Close()
		_ = st.Close()
	})
	until(t, "the hub follows the bells", func() bool { ok, _ := h.FollowingOthers(); return ok })
	return h
}

func notificationFor(recipient string) domain.Notification {
	return domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges,
		ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: 1}
}

func woken(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// The channel of a recipient's waiter is closed by the time a Save for that
// recipient returns; another recipient's waiter sleeps on.
func TestASaveWakesTheWaitersOfItsRecipientsOnly(t *testing.T) {
	h := newWakeHub(t, hub.Options{})
	a, b := uuid.NewString(), uuid.NewString()
	wakeA1, stopA1, err := h.Watch(a)
	if err != nil {
		t.Fatal(err)
	}
	defer stopA1()
	wakeA2, stopA2, _ := h.Watch(a)
	defer stopA2()
	wakeB, stopB, _ := h.Watch(b)
	defer stopB()
	if n := h.Waiting(); n != 3 {
		t.Fatalf("%d waiters registered, want 3", n)
	}
	if _, err := h.Save(context.Background(), []domain.Notification{notificationFor(a)}); err != nil {
		t.Fatal(err)
	}
	if !woken(wakeA1) || !woken(wakeA2) {
		t.Fatal("a Save for the recipient returned without waking its waiters")
	}
	if woken(wakeB) {
		t.Fatal("a Save for another recipient woke a waiter")
	}
	if n := h.Waiting(); n != 1 {
		t.Fatalf("%d waiters registered after the wake, want 1 (woken ones leave)", n)
	}
	stopB()
	stopA1() // already woken: a no-op
	if n := h.Waiting(); n != 0 {
		t.Fatalf("%d waiters registered after all stopped, want 0", n)
	}
}

// The registry is bounded per recipient and in all; a place freed is taken
// again.
func TestWaitersAreBounded(t *testing.T) {
	h := newWakeHub(t, hub.Options{MaxWaitersPerRecipient: 2, MaxWaiters: 3})
	a, b, c := uuid.NewString(), uuid.NewString(), uuid.NewString()
	var stops []func()
	for _, r := range []string{a, a, b} {
		_, stop, err := h.Watch(r)
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, stop)
	}
	if _, _, err := h.Watch(a); !errors.Is(err, hub.ErrTooManyWaiters) {
		t.Fatalf("a third waiter of one recipient: %v, want ErrTooManyWaiters", err)
	}
	if _, _, err := h.Watch(c); !errors.Is(err, hub.ErrTooManyWaiters) {
		t.Fatalf("a fourth waiter in all: %v, want ErrTooManyWaiters", err)
	}
	stops[2]()
	if _, stop, err := h.Watch(c); err != nil {
		t.Fatalf("a waiter after one left: %v", err)
	} else {
		stop()
	}
	for _, stop := range stops {
		stop()
	}
}

// Closing the hub wakes every waiter and refuses new ones.
func TestCloseWakesWaiters(t *testing.T) {
	st, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	h := hub.New(st, hub.Options{}, nil)
	wake, stop, err := h.Watch(uuid.NewString())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	h.Close()
	if !woken(wake) {
		t.Fatal("Close returned with a waiter still asleep")
	}
	if _, _, err := h.Watch(uuid.NewString()); !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("Watch after Close: %v, want unavailable", err)
	}
	if n := h.Waiting(); n != 0 {
		t.Fatalf("%d waiters registered after Close", n)
	}
}

// A Save that stores nothing new (a duplicate) wakes nobody: there is
// nothing new to peek.
func TestADuplicateSaveWakesNobody(t *testing.T) {
	h := newWakeHub(t, hub.Options{})
	a := uuid.NewString()
	n := notificationFor(a)
	if _, err := h.Save(context.Background(), []domain.Notification{n}); err != nil {
		t.Fatal(err)
	}
	wake, stop, _ := h.Watch(a)
	defer stop()
	if _, err := h.Save(context.Background(), []domain.Notification{n}); err != nil {
		t.Fatal(err)
	}
	if woken(wake) {
		t.Fatal("a duplicate Save woke a waiter")
	}
}
