package client_test

import (
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/energydatahub/messagehub/client"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/test/hubtest"
)

// startWaitingHub serves the hub as the binary does (server.NewGRPCServer,
// with its keepalive pings and enforcement policy) over the embedded store
// on loopback and returns the hub, whose waiter count tells when a Peek is
// waiting.
func startWaitingHub(t *testing.T) (string, *hub.Hub) {
	t.Helper()
	repo := hubtest.Open(t)
	srv, _ := server.NewGRPCServer(repo, slog.New(slog.DiscardHandler))
	return hubtest.Serve(t, srv), repo
}

// untilWaiting holds the test until the hub has a peek waiting; a peek
// registers before it looks, so a Save after this reaches it.
func untilWaiting(t *testing.T, h *hub.Hub) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for h.Waiting() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no peek began to wait")
		}
		time.Sleep(time.Millisecond)
	}
}

// A Peek with Wait answers the bundle of a Save made while it waits, and
// PeekContent likewise (a domain without document provider: the bundle
// alone).
func TestAPeekWithWaitAnswersASaveMadeWhileItWaits(t *testing.T) {
	addr, h := startWaitingHub(t)
	c := newClient(t, addr)
	ctx := within(t)
	recipient := uuid.NewString()

	bundles := make(chan *client.Bundle, 1)
	go func() {
		b, err := c.Peek(ctx, recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, "", client.Wait(20*time.Second))
		if err != nil {
			t.Error(err)
		}
		bundles <- b
	}()
	untilWaiting(t, h)
	saved := notification(recipient)
	if _, err := c.Save(ctx, saved); err != nil {
		t.Fatal(err)
	}
	b := <-bundles
	if got := b.GetNotificationIds(); len(got) != 1 || got[0] != saved.GetId() {
		t.Fatalf("the waiting Peek answered %v, want the notification saved while it waited", got)
	}
	if err := c.Dequeue(ctx, recipient, b.GetId()); err != nil {
		t.Fatal(err)
	}

	contents := make(chan *client.Content, 1)
	go func() {
		content, err := c.PeekContent(ctx, recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, "", client.Wait(20*time.Second))
		if err != nil {
			t.Error(err)
		}
		contents <- content
	}()
	untilWaiting(t, h)
	saved = notification(recipient)
	if _, err := c.Save(ctx, saved); err != nil {
		t.Fatal(err)
	}
	content := <-contents
	if got := content.Bundle.GetNotificationIds(); len(got) != 1 || got[0] != saved.GetId() || content.MediaType != "" || len(content.Document) != 0 {
		t.Fatalf("the waiting PeekContent answered %+v, want the bundle of the notification saved while it waited, without document", content)
	}
}

// With nothing to deliver a Peek with Wait answers nil once the wait is
// over; PeekContent too. A wait over MaxWait is the caller's mistake, not
// retried.
func TestAPeekWithWaitAndNothingAnswersNilAfterTheWait(t *testing.T) {
	addr, _ := startWaitingHub(t)
	c := newClient(t, addr)
	ctx := within(t)
	const wait = 200 * time.Millisecond
	start := time.Now()
	if b, err := c.Peek(ctx, uuid.NewString(), messagehubv1.PeekGroup_PEEK_GROUP_ALL, "", client.Wait(wait)); err != nil || b != nil {
		t.Fatalf("Peek: %v, %v; want nil", b, err)
	}
	if content, err := c.PeekContent(ctx, uuid.NewString(), messagehubv1.PeekGroup_PEEK_GROUP_ALL, "", client.Wait(wait)); err != nil || content != nil {
		t.Fatalf("PeekContent: %v, %v; want nil", content, err)
	}
	if took := time.Since(start); took < 2*wait {
		t.Fatalf("two waits of %s took %s", wait, took)
	}
	_, err := c.Peek(ctx, uuid.NewString(), messagehubv1.PeekGroup_PEEK_GROUP_ALL, "", client.Wait(client.MaxWait+time.Second))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a wait over MaxWait: %v, want INVALID_ARGUMENT", err)
	}
}

// A Peek with Wait waits even when RetryPolicy.AttemptTimeout is shorter
// than the wait and the hub's one-second margin: it is not answered at once
// (an actor peeking again at once would then poll the hub without pause),
// and a Save made while it waits is answered. PeekContent likewise.
func TestAPeekWithWaitWaitsUnderAShortAttemptTimeout(t *testing.T) {
	addr, h := startWaitingHub(t)
	c, err := client.New(addr, client.Options{Plaintext: true, Retry: client.RetryPolicy{AttemptTimeout: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx := within(t)
	recipient := uuid.NewString()
	peeks := map[string]func() (*client.Bundle, error){
		"Peek": func() (*client.Bundle, error) {
			return c.Peek(ctx, recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, "", client.Wait(20*time.Second))
		},
		"PeekContent": func() (*client.Bundle, error) {
			content, err := c.PeekContent(ctx, recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, "", client.Wait(20*time.Second))
			if content == nil {
				return nil, err
			}
			return content.Bundle, err
		},
	}
	for _, name := range []string{"Peek", "PeekContent"} {
		type answer struct {
			b   *client.Bundle
			err error
		}
		answers := make(chan answer, 1)
		go func() {
			b, err := peeks[name]()
			answers <- answer{b, err}
		}()
		for h.Waiting() == 0 {
			select {
			case a := <-answers:
				t.Fatalf("%s with Wait(20s) and AttemptTimeout 500ms answered %v, %v without waiting", name, a.b, a.err)
			case <-time.After(time.Millisecond):
			}
		}
		saved := notification(recipient)
		if _, err := c.Save(ctx, saved); err != nil {
			t.Fatal(err)
		}
		a := <-answers
		if got := a.b.GetNotificationIds(); a.err != nil || len(got) != 1 || got[0] != saved.GetId() {
			t.Fatalf("%s answered %v, %v; want the notification saved while it waited", name, got, a.err)
		}
		if err := c.Dequeue(ctx, recipient, a.b.GetId()); err != nil {
			t.Fatal(err)
		}
	}
}

// An AttemptTimeout of the longest duration (no bound of the client's own:
// the caller's context alone bounds each attempt) still lets a Peek with
// Wait wait: the wait added to it does not wrap around to a timeout that
// has already passed. PeekContent likewise.
func TestAPeekWithWaitUnderTheLongestAttemptTimeoutWaits(t *testing.T) {
	addr, _ := startWaitingHub(t)
	c := newClientWith(t, addr, client.Options{Plaintext: true, Retry: client.RetryPolicy{AttemptTimeout: math.MaxInt64, InitialBackoff: time.Millisecond}})
	ctx := within(t)
	if b, err := c.Peek(ctx, uuid.NewString(), messagehubv1.PeekGroup_PEEK_GROUP_ALL, "", client.Wait(time.Millisecond)); err != nil || b != nil {
		t.Fatalf("Peek with Wait: %v, %v; want nil after the wait", b, err)
	}
	if content, err := c.PeekContent(ctx, uuid.NewString(), messagehubv1.PeekGroup_PEEK_GROUP_ALL, "", client.Wait(time.Millisecond)); err != nil || content != nil {
		t.Fatalf("PeekContent with Wait: %v, %v; want nil after the wait", content, err)
	}
}
