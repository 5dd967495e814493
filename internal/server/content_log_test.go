package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/blobstore"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/lograte"
	"github.com/energydatahub/messagehub/test/azuritetest"
)

// fakeContentStream is a PeekContent stream of a call whose context the
// test holds.
type fakeContentStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*messagehubv1.PeekContentChunk
}

func (f *fakeContentStream) Context() context.Context { return f.ctx }

func (f *fakeContentStream) Send(m *messagehubv1.PeekContentChunk) error {
	f.sent = append(f.sent, m)
	return nil
}

// peekContentLogged runs one PeekContent of a bundle whose domain hangs, in
// a call with context ctx, maps its error as the interceptor does and
// returns the status and what was logged at info or above.
func peekContentLogged(ctx context.Context, t *testing.T, svc *Service) (*status.Status, string) {
	t.Helper()
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	err := svc.PeekContent(&messagehubv1.PeekRequest{Recipient: recipient}, &fakeContentStream{ctx: ctx})
	return status.Convert(ToStatus(logger, "/messagehub.v1.MessageHub/PeekContent", err)), logs.String()
}

// hangingDocuments serves a time series bundle whose domain holds every
// call until the test ends; asked hears of each call.
func hangingDocuments(t *testing.T, contentTimeout time.Duration) (*Service, <-chan struct{}) {
	t.Helper()
	release, asked := make(chan struct{}), make(chan struct{}, 100)
	t.Cleanup(func() { close(release) })
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		asked <- struct{}{}
		return contenttest.Answer{Hold: release}
	})
	svc := NewService(&recordingHub{bundle: timeSeriesBundle(1)})
	svc.documents, svc.contentTimeout = provider.Documents(t), contentTimeout
	return svc, asked
}

// A content peek its caller gives up on (cancelled, or its own deadline
// passed) while the domain hangs is the caller's choice: it is answered
// with the caller's code and logs nothing at info or above, let alone a
// warning that blames the store.
func TestContentPeeksTheCallerGivesUpOnAreNotWarnings(t *testing.T) {
	svc, asked := hangingDocuments(t, time.Minute)

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-asked // the domain is being asked: the peek waits for it
		cancel()
	}()
	st, logs := peekContentLogged(ctx, t, svc)
	if st.Code() != codes.Canceled || logs != "" {
		t.Fatalf("a cancelled content peek: %v, logged %q; want CANCELED, nothing at info or above", st, logs)
	}
	for range 20 {
		// As a client with a 50 ms deadline: the build already runs, so
		// the peek waits for it until the caller's deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		st, logs := peekContentLogged(ctx, t, svc)
		cancel()
		if st.Code() != codes.DeadlineExceeded || logs != "" {
			t.Fatalf("a content peek past its caller's deadline: %v, logged %q; want DEADLINE_EXCEEDED, nothing at info or above", st, logs)
		}
	}
}

// A document its domain has not built within the content timeout is
// routine (the actor peeks again): UNAVAILABLE, but no warning at every
// peek.
func TestADocumentNotReadyIsNoWarning(t *testing.T) {
	svc, _ := hangingDocuments(t, 50*time.Millisecond)
	for range 3 {
		st, logs := peekContentLogged(context.Background(), t, svc)
		if st.Code() != codes.Unavailable || logs != "" {
			t.Fatalf("a content peek whose document is not ready: %v, logged %q; want UNAVAILABLE, nothing at info or above", st, logs)
		}
	}
}

// UNAVAILABLE answers are warnings, but a flood of them (a store down, a
// client retrying in a loop) makes at most unavailablePerSecond lines a
// second, and the lines do not blame the store for what may be anything.
func TestUnavailableWarningsAreRateLimited(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	start := time.Now()
	const calls = 1000
	for range calls {
		_ = ToStatus(logger, "/messagehub.v1.MessageHub/Peek", domain.ErrUnavailable)
	}
	seconds := int(time.Since(start)/time.Second) + 1 // windows the calls may have spanned
	lines := strings.Count(logs.String(), "\n")
	if lines == 0 || lines > seconds*unavailablePerSecond {
		t.Fatalf("%d lines for %d UNAVAILABLE answers in under %d s; want 1 to %d", lines, calls, seconds, seconds*unavailablePerSecond)
	}
	if strings.Contains(logs.String(), "store unavailable") {
		t.Fatalf("an UNAVAILABLE answer is blamed on the store: %s", logs.String())
	}
}

// A content peek whose document store stopped answering runs out of its
// time in the store's read: the client is told UNAVAILABLE without the
// store's own words (that it is blob storage, the blob's name, the SDK's
// error), which the log keeps.
func TestAContentPeekOfAStoppedDocumentStoreTellsTheClientNoStoreDetail(t *testing.T) {
	azurite := azuritetest.Start(t)
	blobs, err := blobstore.Open(t.Context(), blobstore.Config{ConnectionString: azurite.ConnectionString(), Container: azuritetest.UniqueContainer("down"), Provision: true})
	if err != nil {
		t.Fatal(err)
	}
	// Stopped, Azurite refuses connections and the blob client retries
	// after a pause of most of a second: the peek's 100 ms end first.
	azurite.Stop()
	docs := content.NewService(content.Options{Store: blobs})
	t.Cleanup(docs.Close)
	svc := NewService(&recordingHub{bundle: timeSeriesBundle(1)})
	svc.documents, svc.contentTimeout = docs, 100*time.Millisecond
	unavailableLines = lograte.Limiter{Max: unavailablePerSecond} // no earlier test's warnings hold this one's back

	st, logs := peekContentLogged(context.Background(), t, svc)
	if st.Code() != codes.Unavailable {
		t.Fatalf("got %v; want UNAVAILABLE, so that the actor peeks again", st)
	}
	for _, detail := range []string{"blob", recipient + "/" + bundleID, azuritetest.AccountName, "127.0.0.1"} {
		if strings.Contains(st.Message(), detail) {
			t.Errorf("the client reads %q, which names %q of the document store", st.Message(), detail)
		}
	}
	if !strings.Contains(logs, "blob storage: reading "+recipient+"/"+bundleID) {
		t.Errorf("the log %q does not say which read of the document store failed", logs)
	}
}
