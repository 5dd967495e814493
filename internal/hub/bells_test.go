package hub_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// bellStore is an embedded store whose bells the test plays: RingBell
// reports what the hub rang, ReadBells gives what the test hands in (the
// other instances' bells) or fails while fail is set.
type bellStore struct {
	store.Store
	rung   chan []string
	others chan []string
	// hold, when set, holds every read until it is closed.
	hold chan struct{}

	mu      sync.Mutex
	fail    error
	cursors []string // of every read
}

func (s *bellStore) RingBell(_ context.Context, recipients []string) error {
	s.rung <- slices.Clone(recipients)
	return nil
}

func (s *bellStore) ReadBells(_ context.Context, cursor string) ([]string, string, error) {
	if s.hold != nil {
		<-s.hold
	}
	s.mu.Lock()
	err := s.fail
	s.cursors = append(s.cursors, cursor)
	s.mu.Unlock()
	if err != nil {
		return nil, cursor, err
	}
	select {
	case r := <-s.others:
		return r, cursor + "+", nil
	default:
		return nil, cursor + ".", nil
	}
}

func (s *bellStore) setFail(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

func newBellHub(t *testing.T, opts hub.Options) (*hub.Hub, *bellStore) {
	t.Helper()
	return newHeldBellHub(t, opts, nil)
}

// newHeldBellHub is newBellHub whose reads of the bells wait until hold is
// closed (none when it is nil).
func newHeldBellHub(t *testing.T, opts hub.Options, hold chan struct{}) (*hub.Hub, *bellStore) {
	t.Helper()
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := &bellStore{Store: inner, rung: make(chan []string, 16), others: make(chan []string, 16), hold: hold}
	opts.BellPoll = 10 * time.Millisecond
	h := hub.New(st, opts, nil)
	t.Cleanup(func() {
		h.Close()
		_ = inner.Close()
	})
	return h, st
}

// until waits for cond, checking every few milliseconds, for at most 30 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A Save that stored something rings the bell for its recipients; a Save of
// duplicates only rings none, nor does a Save refused for an id stored with
// other content: it made nothing visible.
func TestACommittedSaveRingsTheBellForItsRecipients(t *testing.T) {
	h, st := newBellHub(t, hub.Options{})
	a, b := uuid.NewString(), uuid.NewString()
	na := notificationFor(a)
	if _, err := h.Save(context.Background(), []domain.Notification{na, notificationFor(b)}); err != nil {
		t.Fatal(err)
	}
	got := <-st.rung
	slices.Sort(got)
	want := []string{a, b}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("rang %v, want the Save's recipients %v", got, want)
	}
	if _, err := h.Save(context.Background(), []domain.Notification{na}); err != nil {
		t.Fatal(err)
	}
	conflicting := na
	conflicting.Weight++
	if _, err := h.Save(context.Background(), []domain.Notification{conflicting}); !errors.Is(err, domain.ErrNotificationConflict) {
		t.Fatalf("a Save of a stored id with other content: %v, want a conflict", err)
	}
	h.Close() // rings what is pending before it returns
	select {
	case r := <-st.rung:
		t.Fatalf("a Save of a duplicate or a refused one rang %v", r)
	default:
	}
}

// The recipients of the other instances' bells wake this hub's waiters; a
// read that fails stops the following (its channel closes, the failure is
// counted), and the next that works takes it up again.
func TestOtherInstancesBellsWakeWaitersAndAFailedReadStopsTheFollowing(t *testing.T) {
	var mu sync.Mutex
	var failures []string
	h, st := newBellHub(t, hub.Options{BellErrors: func(op string) { mu.Lock(); failures = append(failures, op); mu.Unlock() }})
	until(t, "the hub follows the bells", func() bool { ok, _ := h.FollowingOthers(); return ok })

	a, b := uuid.NewString(), uuid.NewString()
	wakeA, stopA, err := h.Watch(a)
	if err != nil {
		t.Fatal(err)
	}
	defer stopA()
	wakeB, stopB, _ := h.Watch(b)
	defer stopB()
	st.others <- []string{a}
	<-wakeA
	if woken(wakeB) {
		t.Fatal("another recipient's bell woke a waiter")
	}

	_, lost := h.FollowingOthers()
	st.setFail(errors.New("feed refused"))
	<-lost
	if ok, _ := h.FollowingOthers(); ok {
		t.Fatal("still following after a failed read")
	}
	mu.Lock()
	counted := slices.Contains(failures, hub.BellRead)
	mu.Unlock()
	if !counted {
		t.Fatal("the failed read was not counted")
	}
	st.setFail(nil)
	until(t, "the hub follows the bells again", func() bool { ok, _ := h.FollowingOthers(); return ok })
	st.others <- []string{b}
	<-wakeB
}

// Reads that keep failing start over from the present (the empty cursor):
// the cursor may be what fails. A single failure keeps it.
func TestReadsOfTheBellsThatKeepFailingStartOverFromThePresent(t *testing.T) {
	h, st := newBellHub(t, hub.Options{})
	until(t, "the hub follows the bells", func() bool { ok, _ := h.FollowingOthers(); return ok })
	st.setFail(errors.New("no such continuation"))
	st.mu.Lock()
	from := len(st.cursors)
	st.mu.Unlock()
	until(t, "a read from the present", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return slices.Contains(st.cursors[from:], "")
	})
	st.mu.Lock()
	failedWith := st.cursors[from:]
	st.mu.Unlock()
	if failedWith[0] == "" || failedWith[1] != failedWith[0] {
		t.Fatalf("reads after the first failure used the cursors %q: the first failures must keep the cursor", failedWith)
	}
}

// Reads of the bells that keep failing start over from the present, which
// leaves out the bells rung meanwhile. A waiter that peeked before the
// following was taken up again and waits after it (FollowingOthers says
// so) would rely on a wake that no bell brings for a Save through another
// instance between its peek and that present, and sleep until its wait
// ends while the notifications are there: taking the following up from
// the present wakes every waiter, so that each looks again.
func TestFollowingTakenUpFromThePresentWakesEveryWaiter(t *testing.T) {
	h, st := newBellHub(t, hub.Options{})
	until(t, "the hub follows the bells", func() bool { ok, _ := h.FollowingOthers(); return ok })
	_, lost := h.FollowingOthers()
	st.setFail(errors.New("no such continuation"))
	<-lost
	st.mu.Lock()
	from := len(st.cursors)
	st.mu.Unlock()

	// Another instance saves for r; its bell is rung while this hub's reads
	// fail, and a read from the present does not bring it.
	r, wake := waitThenSaveElsewhere(t, h, st)
	until(t, "a read from the present", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return slices.Contains(st.cursors[from:], "")
	})
	st.setFail(nil)
	until(t, "the hub follows the bells again", func() bool { ok, _ := h.FollowingOthers(); return ok })
	wantWokenToFind(t, h, r, wake, "the following was taken up from the present")
}

// waitThenSaveElsewhere registers a waiter of a new recipient on h, which
// peeks and finds nothing, and then has another instance on the same store
// save for the recipient: its bell is not one st's reads give. It returns
// the recipient and the waiter's channel.
func waitThenSaveElsewhere(t *testing.T, h *hub.Hub, st *bellStore) (string, <-chan struct{}) {
	t.Helper()
	r := uuid.NewString()
	wake, stop, err := h.Watch(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if b, err := h.Peek(context.Background(), r, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("peek = %v, %v; want nothing yet", b, err)
	}
	other := hub.New(st.Store, hub.Options{}, nil)
	t.Cleanup(other.Close)
	if _, err := other.Save(context.Background(), []domain.Notification{notificationFor(r)}); err != nil {
		t.Fatal(err)
	}
	return r, wake
}

// wantWokenToFind fails unless the waiter of r was woken when the following
// began as why says, and a peek then finds the other instance's
// notification.
func wantWokenToFind(t *testing.T, h *hub.Hub, r string, wake <-chan struct{}, why string) {
	t.Helper()
	if !woken(wake) {
		t.Fatalf("%s and the waiter, which peeked before it, was not woken to look again", why)
	}
	if b, err := h.Peek(context.Background(), r, domain.GroupAll, ""); err != nil || b == nil {
		t.Fatalf("peek after the wake = %v, %v; want the other instance's notification", b, err)
	}
}

// A hub starts following the bells from the present, which leaves out the
// bells rung before its first read: a waiter that peeked before that read
// and waits after it (FollowingOthers says so) would rely on a wake that no
// bell brings for a Save through another instance between its peek and
// that present. The first read that works wakes every waiter, so that each
// looks again.
func TestFollowingStartedFromThePresentWakesEveryWaiter(t *testing.T) {
	hold := make(chan struct{})
	h, st := newHeldBellHub(t, hub.Options{}, hold)
	// Another instance saves for r before the hub's first read of the
	// bells, which starts after its bell, at the present.
	r, wake := waitThenSaveElsewhere(t, h, st)
	close(hold)
	until(t, "the hub follows the bells", func() bool { ok, _ := h.FollowingOthers(); return ok })
	wantWokenToFind(t, h, r, wake, "the following started from the present")
}
