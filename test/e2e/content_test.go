package e2e

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/test/azuritetest"
)

// contentStoreArgs are a backend's flags for bundle content: on cosmos,
// documents go to an Azurite of the test's own.
func contentStoreArgs(t *testing.T, backend string, args []string) []string {
	t.Helper()
	if backend != "cosmos" {
		return args
	}
	blob := azuritetest.Start(t)
	return append(args, "--content-blob-connection-string", blob.ConnectionString(),
		"--content-blob-container", azuritetest.UniqueContainer("e2e"),
		// A killed hub's dequeues are another instance's to the restarted
		// one: told once this old, within the tests' call timeout.
		"--content-notice-grace", "2s")
}

// peekContent reads a whole PeekContent stream: the first message and the
// data of all of them.
func (h *hub) peekContent(t *testing.T, recipient string) (*messagehubv1.PeekContentChunk, []byte, error) {
	t.Helper()
	stream, err := h.client.PeekContent(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		return nil, nil, err
	}
	var first *messagehubv1.PeekContentChunk
	var data []byte
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return first, data, nil
		}
		if err != nil {
			return first, data, err
		}
		if first == nil {
			first = msg
		}
		data = append(data, msg.GetData()...)
	}
}

// The binary asks the domain once, stores the document, and serves the same
// bytes after a restart; a slow domain makes the peek UNAVAILABLE while the
// hub goes on building the document in the background.
func TestContentIsBuiltOnceAndSurvivesARestart(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			testContentIsBuiltOnceAndSurvivesARestart(t, contentStoreArgs(t, b.name, b.args()))
		})
	}
}

func testContentIsBuiltOnceAndSurvivesARestart(t *testing.T, storeArgs []string) {
	document := bytes.Repeat([]byte("<MarketDocument/>"), 200_000) // 3.4 MB
	release := make(chan struct{})
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		a := contenttest.Document("application/xml", document, 256<<10)
		a.Hold = release
		return a
	})
	dataDir := t.TempDir()
	// The content timeout bounds the whole content peek, the read of a
	// stored document included (3.4 MB from the blob store, which a loaded
	// machine can take more than 300 ms over): long enough for that, and
	// still what a peek waits for while the domain holds its answer.
	args := append([]string{"--content-provider", "DOMAIN_TIME_SERIES=" + provider.Address, "--content-timeout", "3s"}, storeArgs...)
	h := startHubIn(t, dataDir, args...)

	recipient := newID()
	if _, err := h.client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{{
		Id: newID(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES,
		ContentType: "rsm-014", SupportsBundling: true, Weight: 1,
	}}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.peekContent(t, recipient); status.Code(err) != codes.Unavailable {
		t.Fatalf("a peek while the domain is slow: %v, want UNAVAILABLE", err)
	}
	close(release)
	first, data := peekContentServed(t, h, recipient, "after the domain answered")
	if first.GetMediaType() != "application/xml" || !bytes.Equal(data, document) {
		t.Fatalf("got %q with %d bytes, want the provider's application/xml of %d", first.GetMediaType(), len(data), len(document))
	}
	bundleID := first.GetBundle().GetId()

	if _, err := h.terminate(t); err != nil {
		t.Fatal(err)
	}
	h = startHubIn(t, dataDir, args...)
	again, data := peekContentServed(t, h, recipient, "after the restart")
	if again.GetBundle().GetId() != bundleID || !bytes.Equal(data, document) {
		t.Fatal("after a restart the peek served another bundle or other bytes")
	}
	if n := provider.Creates(bundleID); n != 1 {
		t.Fatalf("the domain was asked %d times, want once", n)
	}
	if _, err := h.client.Dequeue(ctxT(t), &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: bundleID}); err != nil {
		t.Fatal(err)
	}
	if first, _, err := h.peekContent(t, recipient); err != nil || first != nil {
		t.Fatalf("after the dequeue: %v, %v; want an empty stream", first, err)
	}
}

// Every dequeue of a domain with a provider is told to it at least once,
// even when the hub is killed before the domain could be reached.
func TestDequeuesAreToldAfterAKill(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { testDequeuesAreToldAfterAKill(t, contentStoreArgs(t, b.name, b.args())) })
	}
}

func testDequeuesAreToldAfterAKill(t *testing.T, storeArgs []string) {
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("text/plain", []byte("x"), 1)
	})
	provider.FailDequeued(1_000_000) // down until the restart
	dataDir := t.TempDir()
	args := append([]string{"--content-provider", "DOMAIN_TIME_SERIES=" + provider.Address}, storeArgs...)
	h := startHubIn(t, dataDir, args...)
	recipient := newID()
	var notes []*messagehubv1.DataAvailable
	for range 3 {
		n := notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")
		n.SupportsBundling = false
		notes = append(notes, n)
	}
	if _, err := h.client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: notes}); err != nil {
		t.Fatal(err)
	}
	dequeued := map[string]bool{}
	for range notes {
		resp, err := h.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient})
		if err != nil {
			t.Fatal(err)
		}
		id := resp.GetBundle().GetId()
		if _, err := h.client.Dequeue(ctxT(t), &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: id}); err != nil {
			t.Fatal(err)
		}
		dequeued[id] = true
	}
	h.Kill() // SIGKILL: nothing was told yet

	provider.FailDequeued(0)
	startHubIn(t, dataDir, args...)
	ctx := ctxT(t)
	for len(dequeued) > 0 {
		select {
		case b := <-provider.Told():
			delete(dequeued, b.GetId()) // a repeat is allowed
		case <-ctx.Done():
			t.Fatalf("%d dequeues were never told after the restart", len(dequeued))
		}
	}
}

// A hub killed while a document is being built keeps nothing half-written:
// after the restart the domain is asked again and the whole document served.
// On Cosmos DB the restarted hub first waits out the dead one's lease.
func TestAKillWhileADocumentIsBuiltLeavesNothingBehind(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			args := contentStoreArgs(t, b.name, b.args())
			if b.name == "cosmos" {
				args = append(args, "--content-lease", "2s")
			}
			testAKillWhileADocumentIsBuiltLeavesNothingBehind(t, args)
		})
	}
}

// peekContentServed peeks recipient's content until it is served: a content
// peek that runs out of its content timeout (the domain still building, or a
// busy machine reading the stored document) is UNAVAILABLE and peeked again,
// for a minute at most.
func peekContentServed(t *testing.T, h *hub, recipient, when string) (*messagehubv1.PeekContentChunk, []byte) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		first, data, err := h.peekContent(t, recipient)
		if err == nil {
			return first, data
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("peek %s: %v", when, err)
		}
	}
}

func testAKillWhileADocumentIsBuiltLeavesNothingBehind(t *testing.T, storeArgs []string) {
	document := bytes.Repeat([]byte("<Series/>"), 100_000)
	release := make(chan struct{})
	stalled := make(chan struct{}) // the first answer has sent part of the document
	provider := contenttest.Start(t, func(_ *messagehubv1.Bundle, calls int) contenttest.Answer {
		a := contenttest.Document("application/xml", document, 64<<10)
		if calls == 0 {
			// The first answer sends part of the document, then stalls
			// until the hub that asked for it is killed.
			a.Chunks, a.Stall = a.Chunks[:2], release
			close(stalled)
		}
		return a
	})
	defer close(release)
	dataDir := t.TempDir()
	args := append([]string{"--content-provider", "DOMAIN_TIME_SERIES=" + provider.Address, "--content-timeout", "200ms"}, storeArgs...)
	h := startHubIn(t, dataDir, args...)
	recipient := newID()
	n := notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")
	if _, err := h.client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{n}}); err != nil {
		t.Fatal(err)
	}
	// The kill must come while the domain is being asked, not before: a hub
	// killed before it asks leaves the stalling first answer to its successor.
	// A peek answers UNAVAILABLE after the content timeout, which a busy
	// machine can spend before the hub gets to ask: peek until it has asked.
	asked := ctxT(t)
	for {
		if _, _, err := h.peekContent(t, recipient); status.Code(err) != codes.Unavailable {
			t.Fatalf("a peek while the document is half built: %v, want UNAVAILABLE", err)
		}
		select {
		case <-stalled:
		case <-asked.Done():
			t.Fatal("the hub never asked the domain for the document")
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	h.Kill()

	h = startHubIn(t, dataDir, args...)
	deadline := time.Now().Add(time.Minute)
	for {
		first, data, err := h.peekContent(t, recipient)
		if err == nil {
			if first.GetMediaType() != "application/xml" || !bytes.Equal(data, document) {
				t.Fatalf("after the restart: %q with %d bytes, want the whole document", first.GetMediaType(), len(data))
			}
			if n := provider.Creates(first.GetBundle().GetId()); n != 2 {
				t.Fatalf("the domain was asked %d times, want twice (before the kill and after)", n)
			}
			break
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("peek after the restart: %v", err)
		}
	}
	leftovers, err := filepath.Glob(filepath.Join(dataDir, "content", "*", "*.tmp"))
	if err != nil || len(leftovers) != 0 {
		t.Fatalf("half-written documents left: %v (%v)", leftovers, err)
	}
}
