package app_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/app"
	"github.com/energydatahub/messagehub/internal/store"
)

// stuckStore is a database that does not answer: every CommitSaves waits,
// whatever its context says, until the test releases it, and then fails
// (or, passing, is made).
type stuckStore struct {
	store.Store
	entered chan struct{} // a write has reached the store
	release chan struct{} // closed: the writes answer
	once    sync.Once
	passing bool // the writes answered are made
}

func newStuckStore() *stuckStore {
	return &stuckStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (s *stuckStore) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	if s.passing {
		return s.Store.CommitSaves(ctx, saves)
	}
	return errors.New("the store answered only after shutdown")
}

func (s *stuckStore) answer() { s.once.Do(func() { close(s.release) }) }

// awaitWrite waits until a write reaches the store, and fails the test if
// the Save that makes it answers first (on saved).
func (s *stuckStore) awaitWrite(t *testing.T, saved <-chan error) {
	t.Helper()
	select {
	case <-s.entered:
	case err := <-saved:
		t.Fatalf("the Save ended before its write reached the store: %v", err)
	case <-time.After(callTimeout):
		t.Fatal("the Save's write did not reach the store")
	}
}

// A Save whose write the store never answers neither holds shutdown up
// beyond its timeout nor is acknowledged: Close returns within the bound and
// says what it left unfinished, and the Save's caller gets an error.
func TestCloseIsBoundedWhileTheStoreDoesNotAnswer(t *testing.T) {
	cfg := testConfig(t)
	stuck := newStuckStore()
	app.WrapStore(&cfg, func(s store.Store) store.Store { stuck.Store = s; return stuck })
	r := start(t, cfg)
	t.Cleanup(stuck.answer) // before the cleanup that closes the App again

	saved := make(chan error, 1)
	go func() {
		// No deadline of its own: only the hub ends this call.
		_, err := r.client.Save(context.Background(), &messagehubv1.SaveRequest{
			Notifications: []*messagehubv1.DataAvailable{notification(uuid.NewString())},
		})
		saved <- err
	}()
	stuck.awaitWrite(t, saved)

	err := r.closeWithin(t)
	if !errors.Is(err, app.ErrShutdownTimedOut) {
		t.Errorf("Close with a write still in the store: %v; want ErrShutdownTimedOut", err)
	}
	select {
	case err := <-saved:
		if err == nil {
			t.Fatal("the Save cut off by shutdown was acknowledged")
		}
		t.Logf("the Save's caller got: %v", err)
	case <-time.After(callTimeout):
		t.Fatal("the Save's caller got no answer after Close")
	}

	// Once the store answers, what was left open closes.
	stuck.answer()
	select {
	case <-app.Released(r.app):
	case <-time.After(callTimeout):
		t.Fatal("the App did not finish closing once the store answered")
	}
}

// A shutdown answers the Peeks that wait for data at once (with nothing),
// rather than letting them hold the drain until it is forced.
func TestAShutdownEndsWaitingPeeksAtOnce(t *testing.T) {
	cfg := testConfig(t)
	cfg.ShutdownTimeout = 20 * time.Second // the drain would be forced after 15 s
	r := start(t, cfg)
	peeked := make(chan error, 1)
	go func() {
		resp, err := r.client.Peek(callContext(t), &messagehubv1.PeekRequest{Recipient: uuid.NewString(), WaitMs: 30_000})
		if err == nil && resp.GetBundle() != nil {
			err = errors.New("a bundle for a recipient with nothing saved")
		}
		peeked <- err
	}()
	for deadline := time.Now().Add(callTimeout); app.Waiting(r.app) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Peek never waited")
		}
	}
	began := time.Now()
	r.stop()
	if err := r.app.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(began); took >= cfg.ShutdownTimeout*3/4 {
		t.Fatalf("Close took %s: the waiting Peek held the drain until it was forced", took)
	}
	if err := <-peeked; err != nil && status.Code(err) != codes.Unavailable {
		t.Fatalf("the waiting Peek: %v, want an empty answer or UNAVAILABLE", err)
	}
}
