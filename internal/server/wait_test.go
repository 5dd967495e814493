package server

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// watchedHub is a real hub over the embedded store that says when a peek
// found nothing while a waiter of its recipient was registered: the moment
// a waiting Peek is asleep, at which the tests save.
type watchedHub struct {
	*hub.Hub
	asleep chan struct{}
}

func (h *watchedHub) Peek(ctx context.Context, recipient string, group domain.PeekGroup, bundleID string) (*domain.Bundle, error) {
	b, err := h.Hub.Peek(ctx, recipient, group, bundleID)
	if err == nil && b == nil && h.Waiting() > 0 {
		h.asleep <- struct{}{}
	}
	return b, err
}

func newWatchedHub(t *testing.T) *watchedHub { t.Helper(); return newWatchedHubWith(t, hub.Options{}) }

func newWatchedHubWith(t *testing.T, opts hub.Options) *watchedHub {
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
	return &watchedHub{Hub: h, asleep: make(chan struct{}, 16)}
}

// noRecheck leaves the wake-up as the only way a waiting Peek looks again.
var noRecheck = WithWaitRecheck(time.Hour)

const waitMs = 20_000

// A waiting Peek answers with the bundle as soon as a Save for its recipient
// commits through the same hub: without the wake-up it would answer empty
// once its wait is over (no re-check runs within the wait).
func TestAWaitingPeekReturnsTheBundleASaveForItsRecipientCommits(t *testing.T) {
	h := newWatchedHub(t)
	conn, _ := testConn(t, h, noRecheck)
	client := messagehubv1.NewMessageHubClient(conn)
	ctx := ctxT(t)
	start := time.Now()
	if n := saveWhileAPeekWaits(ctx, t, client, h, waitMs, 3); n != 3 {
		t.Fatalf("the waiting Peek answered %d notifications after %s, want the 3 saved before its wait of %d ms ended",
			n, time.Since(start), waitMs)
	}
	if n := h.Waiting(); n != 0 {
		t.Fatalf("%d waiters left registered", n)
	}
}

// PeekContent waits the same way.
func TestAWaitingPeekContentStreamsTheBundleASaveCommits(t *testing.T) {
	h := newWatchedHub(t)
	conn, _ := testConn(t, h, noRecheck)
	client := messagehubv1.NewMessageHubClient(conn)
	ctx := ctxT(t)

	chunks := make(chan []*messagehubv1.PeekContentChunk, 1)
	errs := make(chan error, 1)
	go func() {
		got, err := receiveAll(t, client, &messagehubv1.PeekRequest{Recipient: recipient, WaitMs: waitMs})
		chunks <- got
		errs <- err
	}()
	<-h.asleep
	if _, err := client.Save(ctx, &messagehubv1.SaveRequest{Notifications: notifications(2)}); err != nil {
		t.Fatal(err)
	}
	got, err := <-chunks, <-errs
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].GetBundle().GetNotificationIds()) != 2 {
		t.Fatalf("the waiting PeekContent sent %v, want the bundle of the 2 saved", got)
	}
}

// With nothing to deliver, a waiting Peek answers empty once its wait is
// over, and not before.
func TestAWaitingPeekWithNothingAnswersEmptyAfterItsWait(t *testing.T) {
	h := newWatchedHub(t)
	client, _, _ := testServer(t, h)
	const wait = 300 * time.Millisecond
	start := time.Now()
	resp, err := client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient, WaitMs: uint32(wait.Milliseconds())})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetBundle() != nil {
		t.Fatalf("bundle %v from an empty hub", resp.GetBundle())
	}
	if took := time.Since(start); took < wait {
		t.Fatalf("answered after %s, before its wait of %s was over", took, wait)
	}
	if n := h.Waiting(); n != 0 {
		t.Fatalf("%d waiters left registered", n)
	}
}

// A wait longer than the call's deadline ends waitMargin before it, with an
// empty answer rather than DEADLINE_EXCEEDED. The call runs in a synctest
// bubble: its clock moves only while every goroutine waits, so the margin
// is all the answer's way back takes, however busy the machine (on the
// machine's clock a pause of a second lost it the answer).
func TestAWaitEndsBeforeTheCallsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, _, _ := testServer(t, &recordingHub{})
		deadline := time.Now().Add(waitMargin + 500*time.Millisecond)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		resp, err := client.Peek(ctx, &messagehubv1.PeekRequest{Recipient: recipient, WaitMs: waitMs})
		if err != nil || resp.GetBundle() != nil {
			t.Fatalf("Peek: %v, %v; want an empty answer before the deadline", resp, err)
		}
		if early := time.Until(deadline); early != waitMargin {
			t.Fatalf("answered %s before the deadline, want %s", early, waitMargin)
		}
	})
}

// More than 30 s is refused before the hub is asked.
func TestAWaitOverThirtySecondsIsRefused(t *testing.T) {
	h := &recordingHub{}
	client, _, _ := testServer(t, h)
	_, err := client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient, WaitMs: uint32(MaxWait.Milliseconds()) + 1})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Peek with wait_ms 30001: %v, want INVALID_ARGUMENT", err)
	}
	stream, err := client.PeekContent(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient, WaitMs: 1 << 31})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("PeekContent with wait_ms 2^31: %v, want INVALID_ARGUMENT", err)
	}
	if n := h.calls(); n != 0 {
		t.Fatalf("%d calls reached the hub", n)
	}
}

// Closing the hub ends a waiting Peek long before its wait is over.
func TestClosingTheHubEndsWaitingPeeks(t *testing.T) {
	h := newWatchedHub(t)
	conn, _ := testConn(t, h, noRecheck)
	client := messagehubv1.NewMessageHubClient(conn)
	errs := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient, WaitMs: waitMs})
		errs <- err
	}()
	<-h.asleep
	h.Close()
	err := <-errs
	if err != nil && status.Code(err) != codes.Unavailable {
		t.Fatalf("a Peek ended by Close: %v, want an empty answer or UNAVAILABLE", err)
	}
	if took := time.Since(start); took >= waitMs*time.Millisecond {
		t.Fatalf("the Peek answered after %s: Close did not end its wait", took)
	}
}

// Beyond the hub's bound of waiters a Peek still waits, re-checking, rather
// than answering at once (which its client would follow with another wait
// at once).
func TestAPeekBeyondTheWaitersBoundStillWaits(t *testing.T) {
	client, _, _ := testServer(t, hubWithItsOnePlaceTaken(t))
	const wait = 300 * time.Millisecond
	start := time.Now()
	resp, err := client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient, WaitMs: uint32(wait.Milliseconds())})
	if err != nil || resp.GetBundle() != nil {
		t.Fatalf("Peek: %v, %v", resp, err)
	}
	if took := time.Since(start); took < wait {
		t.Fatalf("answered after %s, before its wait of %s", took, wait)
	}
}

// A Peek beyond the waiters' bound has no wake-up, so only its re-checks
// find a Save: they run every DefaultWaitRecheck at the longest even where
// the wake-up is trusted alone (an embedded store: WithWaitRecheck of an
// hour). Without that, a Save made while it waits was found by no look at
// all, and the Peek answered empty at the end of its wait.
func TestAPeekBeyondTheWaitersBoundFindsASaveWhileItWaits(t *testing.T) {
	h, client, ctx := beyondTheBound(t)
	if n := saveWhileAPeekWaits(ctx, t, client, h, uint32(MaxWait.Milliseconds()), 2); n != 2 {
		t.Fatalf("the Peek beyond the bound answered %d notifications, want the 2 saved while it waited %s", n, MaxWait)
	}
}

// saveWhileAPeekWaits starts a Peek waiting wait ms, saves n notifications
// once it is asleep, and returns how many its answer holds.
func saveWhileAPeekWaits(ctx context.Context, t *testing.T, client messagehubv1.MessageHubClient, h *watchedHub, wait uint32, n int) int {
	t.Helper()
	type answer struct {
		resp *messagehubv1.PeekResponse
		err  error
	}
	peeked := make(chan answer, 1)
	go func() {
		resp, err := client.Peek(ctx, &messagehubv1.PeekRequest{Recipient: recipient, WaitMs: wait})
		peeked <- answer{resp, err}
	}()
	<-h.asleep
	if _, err := client.Save(ctx, &messagehubv1.SaveRequest{Notifications: notifications(n)}); err != nil {
		t.Fatal(err)
	}
	got := <-peeked
	if got.err != nil {
		t.Fatal(got.err)
	}
	return len(got.resp.GetBundle().GetNotificationIds())
}

// beyondTheBound is a client of a server whose hub has its one place for
// the recipient's waiters taken, with no re-checks but those of a Peek
// beyond the bound, and a context long enough for a Peek's longest wait.
func beyondTheBound(t *testing.T) (*watchedHub, messagehubv1.MessageHubClient, context.Context) {
	t.Helper()
	h := hubWithItsOnePlaceTaken(t)
	conn, _ := testConn(t, h, noRecheck)
	ctx, cancel := context.WithTimeout(context.Background(), 2*MaxWait)
	t.Cleanup(cancel)
	return h, messagehubv1.NewMessageHubClient(conn), ctx
}

// hubWithItsOnePlaceTaken is a hub over the embedded store with one place
// for the recipient's waiters, taken until the test ends.
func hubWithItsOnePlaceTaken(t *testing.T) *watchedHub {
	t.Helper()
	inner := newWatchedHubWith(t, hub.Options{MaxWaitersPerRecipient: 1})
	// The hub's first read of the bells wakes every waiter, which would
	// free the place taken below: it is taken once that read is done.
	for following, _ := inner.FollowingOthers(); !following; following, _ = inner.FollowingOthers() {
		time.Sleep(time.Millisecond)
	}
	_, stop, err := inner.Watch(recipient)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return inner
}

// Stopping the waits (the start of a shutdown's drain) ends a Peek beyond
// the waiters' bound as it ends the others: it has no wake-up of its own,
// and its next re-check, up to DefaultWaitRecheck away, would hold the
// drain that long.
func TestStoppingWaitsEndsAPeekBeyondTheWaitersBound(t *testing.T) {
	// Its re-check is further away than its wait: without the waits
	// stopping, it answers at the end of its wait, MaxWait away.
	unwokenRecheck = time.Hour
	t.Cleanup(func() { unwokenRecheck = DefaultWaitRecheck })
	h, client, ctx := beyondTheBound(t)
	errs := make(chan error, 1)
	go func() {
		_, err := client.Peek(ctx, &messagehubv1.PeekRequest{Recipient: recipient, WaitMs: uint32(MaxWait.Milliseconds())})
		errs <- err
	}()
	<-h.asleep
	h.StopWaits()
	select {
	case err := <-errs:
		if err != nil {
			t.Fatalf("a Peek ended by StopWaits: %v, want an empty answer", err)
		}
	case <-time.After(MaxWait / 2):
		t.Fatalf("the Peek beyond the bound still waits %s after the waits stopped", MaxWait/2)
	}
}
