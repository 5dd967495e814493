package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/apiconv"
	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/blobstore"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/test/azuritetest"
)

// contentClient serves hub with documents built by a test provider of the
// time series domain and stored in a temporary folder.
func contentClient(t *testing.T, hub Hub, timeout time.Duration, answer func(*messagehubv1.Bundle, int) contenttest.Answer) (messagehubv1.MessageHubClient, *contenttest.Provider) {
	t.Helper()
	provider := contenttest.Start(t, answer)
	conn, _ := testConn(t, hub, WithDocuments(provider.Documents(t), timeout))
	return messagehubv1.NewMessageHubClient(conn), provider
}

// receiveAll reads a PeekContent stream to its end.
func receiveAll(t *testing.T, client messagehubv1.MessageHubClient, req *messagehubv1.PeekRequest) ([]*messagehubv1.PeekContentChunk, error) {
	t.Helper()
	stream, err := client.PeekContent(ctxT(t), req)
	if err != nil {
		return nil, err
	}
	var out []*messagehubv1.PeekContentChunk
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, msg)
	}
}

func timeSeriesBundle(n int) *domain.Bundle {
	b := &domain.Bundle{ID: bundleID, Recipient: recipient, Origin: domain.OriginTimeSeries, ContentType: "TimeSeries", Weight: int64(n)}
	for i := range n {
		b.NotificationIDs = append(b.NotificationIDs, uuidN(i))
	}
	b.DocumentTypes = []string{"TimeSeries"}
	return b
}

func TestPeekContentStreamsTheDocumentInMessagesOfAtMostOneMiB(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 230_000) // 3.5 MiB
	client, _ := contentClient(t, &recordingHub{bundle: timeSeriesBundle(3)}, time.Minute, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("application/xml", data, 100_000)
	})
	msgs, err := receiveAll(t, client, &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) < 4 {
		t.Fatalf("%d messages for 3.5 MiB, want at least 4", len(msgs))
	}
	if msgs[0].GetBundle().GetId() != bundleID || msgs[0].GetMediaType() != "application/xml" {
		t.Fatalf("first message: bundle %q, media type %q", msgs[0].GetBundle().GetId(), msgs[0].GetMediaType())
	}
	var got []byte
	for i, m := range msgs {
		if size := proto.Size(m); size > content.MaxMessageBytes {
			t.Errorf("message %d is %d bytes, over %d", i, size, content.MaxMessageBytes)
		}
		if i > 0 && (m.GetBundle() != nil || m.GetMediaType() != "") {
			t.Errorf("message %d repeats the bundle or media type", i)
		}
		got = append(got, m.GetData()...)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("streamed %d bytes, not the provider's %d", len(got), len(data))
	}
}

func TestPeekContentSendsABundleTooLargeToShareAMessageAlone(t *testing.T) {
	data := []byte("<doc/>")
	client, _ := contentClient(t, &recordingHub{bundle: timeSeriesBundle(domain.DefaultMaxBundleWeight)}, time.Minute, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("application/xml", data, 1024)
	})
	msgs, err := receiveAll(t, client, &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || len(msgs[0].GetBundle().GetNotificationIds()) != domain.DefaultMaxBundleWeight ||
		len(msgs[0].GetData()) != 0 || !bytes.Equal(msgs[1].GetData(), data) {
		t.Fatalf("got %d messages; want the bundle alone, then the data", len(msgs))
	}
}

func TestPeekContentWithNothingToDeliverEndsWithNoMessage(t *testing.T) {
	client, provider := contentClient(t, &recordingHub{}, time.Minute, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Answer{Err: errors.New("not asked")}
	})
	msgs, err := receiveAll(t, client, &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil || len(msgs) != 0 {
		t.Fatalf("got %d messages and %v; want none", len(msgs), err)
	}
	if provider.Creates(bundleID) != 0 {
		t.Fatal("the provider was asked though there was no bundle")
	}
}

func TestPeekContentOfADomainWithoutProviderSendsTheBundleOnly(t *testing.T) {
	b := timeSeriesBundle(2)
	b.Origin = domain.OriginCharges
	client, _ := contentClient(t, &recordingHub{bundle: b}, time.Minute, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Answer{Err: errors.New("not asked")}
	})
	msgs, err := receiveAll(t, client, &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].GetBundle().GetId() != bundleID || msgs[0].GetMediaType() != "" || len(msgs[0].GetData()) != 0 {
		t.Fatalf("got %v; want one message with the bundle, no media type, no data", msgs)
	}
}

func TestPeekContentIsUnavailableWhileTheDomainIsSlow(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	client, _ := contentClient(t, &recordingHub{bundle: timeSeriesBundle(1)}, 50*time.Millisecond, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Answer{Hold: release}
	})
	_, err := receiveAll(t, client, &messagehubv1.PeekRequest{Recipient: recipient})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want UNAVAILABLE", err)
	}
}

// slowHub's Peek answers when its context ends, as a store that is slow.
type slowHub struct{ recordingHub }

func (*slowHub) Peek(ctx context.Context, _ string, _ domain.PeekGroup, _ string) (*domain.Bundle, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("store: %w", ctx.Err())
}

// The content timeout counts from the call's start: one that runs out in
// the store's peek is UNAVAILABLE too, not DEADLINE_EXCEEDED.
func TestPeekContentIsUnavailableWhileTheStoreIsSlow(t *testing.T) {
	client, _ := contentClient(t, &slowHub{}, 50*time.Millisecond, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("text/plain", []byte("x"), 1)
	})
	_, err := receiveAll(t, client, &messagehubv1.PeekRequest{Recipient: recipient})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want UNAVAILABLE", err)
	}
}

func TestPeekContentValidatesAsPeekDoes(t *testing.T) {
	hub := &recordingHub{bundle: timeSeriesBundle(1)}
	client, _ := contentClient(t, hub, time.Minute, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Answer{Err: errors.New("not asked")}
	})
	for _, req := range []*messagehubv1.PeekRequest{
		{Recipient: "not-a-uuid"},
		{Recipient: recipient, Group: 99},
		{Recipient: recipient, BundleId: "nope"},
	} {
		if _, err := receiveAll(t, client, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: got %v, want INVALID_ARGUMENT", req, err)
		}
	}
	if hub.calls() != 0 {
		t.Fatal("an invalid request reached the hub")
	}
}

// PeekContent is a streaming call: its request reaches the authorizer only
// through the stream, which must still make an actor peek as itself.
func TestPeekContentActsForTheCaller(t *testing.T) {
	is, checkTokens := withTestTokens(t)
	hub := &recordingHub{}
	conn, _ := testConn(t, hub, checkTokens)
	client := messagehubv1.NewMessageHubClient(conn)
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer "+token)
	}
	actor := is.RS256(t, is.Claims(recipient, auth.RoleActor))
	domainToken := is.RS256(t, is.Claims(uuidN(7), auth.RoleDomain))

	peek := func(ctx context.Context, req *messagehubv1.PeekRequest) error {
		stream, err := client.PeekContent(ctx, req)
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	if err := peek(as(actor), &messagehubv1.PeekRequest{}); err != nil {
		t.Fatalf("an actor's own peek: %v", err)
	}
	if len(hub.peeks) != 1 || hub.peeks[0].Recipient != recipient {
		t.Fatalf("the hub saw %+v; want one peek as the caller", hub.peeks)
	}
	for name, tc := range map[string]struct {
		ctx context.Context
		req *messagehubv1.PeekRequest
	}{
		"an actor naming another recipient": {as(actor), &messagehubv1.PeekRequest{Recipient: uuidN(9)}},
		"a domain":                          {as(domainToken), &messagehubv1.PeekRequest{Recipient: recipient}},
	} {
		if err := peek(tc.ctx, tc.req); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: got %v, want PERMISSION_DENIED", name, err)
		}
	}
	if err := peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token: got %v, want UNAUTHENTICATED", err)
	}
	if len(hub.peeks) != 1 {
		t.Fatalf("a refused peek reached the hub: %+v", hub.peeks)
	}
}

// A stored document whose download from Azure Blob Storage keeps breaking
// half-way must not be streamed as if it had ended there: the blob store's
// reader, its retries spent, ends with io.ErrUnexpectedEOF, which a content
// peek that stops at an io.ReadFull's short read would take for the end of
// the document and answer OK, the actor then dequeuing a bundle whose data it
// got only part of.
// brokenDownloads stores a 3.2 MB document of bundleID in Azurite and
// returns it and documents served from there through a proxy that cuts
// every answer after 256 KiB: the document's download and each of its
// resumptions break, and far less than the document comes back.
func brokenDownloads(t *testing.T) (*content.Service, []byte) {
	t.Helper()
	azurite, container, data := storedDocument(t)
	return documentsAt(t, azurite.CutAnswers(t, 256<<10), container), data
}

// storedDocument stores a 3.2 MB document of the bundle the tests' hub
// answers (timeSeriesBundle(1)) in a container of Azurite's.
func storedDocument(t *testing.T) (azurite *azuritetest.Server, container string, data []byte) {
	t.Helper()
	azurite = azuritetest.Start(t)
	container = azuritetest.UniqueContainer("cut")
	data = bytes.Repeat([]byte("0123456789abcdef"), 200_000) // 3.2 MB
	direct, err := blobstore.Open(t.Context(), blobstore.Config{ConnectionString: azurite.ConnectionString(), Container: container, Provision: true})
	if err != nil {
		t.Fatal(err)
	}
	contenttest.Put(t, direct, content.Key{Recipient: recipient, BundleID: bundleID, Bundle: content.Identity(apiconv.Bundle(timeSeriesBundle(1)))}, "application/xml", data)
	return azurite, container, data
}

// documentsAt serves the documents of the container through the account
// that connection reaches.
func documentsAt(t *testing.T, connection, container string) *content.Service {
	t.Helper()
	docs, err := blobstore.Open(t.Context(), blobstore.Config{ConnectionString: connection, Container: container})
	if err != nil {
		t.Fatal(err)
	}
	service := content.NewService(content.Options{Store: docs})
	t.Cleanup(service.Close)
	return service
}

// A stored document whose download goes quiet half-way (the connection to
// Azure Blob Storage stops carrying data without closing) holds the
// content peek reading it. Once the caller leaves, the peek must stop
// reading and return, freeing what it holds (the download, and the share
// of the answers' budget of its read buffer): else every such peek stays
// for as long as the connection stays quiet, for ever if it never closes.
func TestAContentPeekWhoseDocumentsDownloadStallsEndsWhenItsCallerLeaves(t *testing.T) {
	azurite, container, _ := storedDocument(t)
	stall := azurite.StallAnswers(t, 256<<10)
	conn, _ := testConn(t, &recordingHub{bundle: timeSeriesBundle(1)}, WithDocuments(documentsAt(t, stall.ConnectionString, container), time.Minute))
	ctx, leave := context.WithCancel(ctxT(t))
	defer leave()
	stream, err := messagehubv1.NewMessageHubClient(conn).PeekContent(ctx, &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		t.Fatal(err)
	}
	received := make(chan error, 1)
	go func() {
		_, err := stream.Recv()
		received <- err
	}()
	select {
	case <-stall.Stalled:
	case err := <-received:
		t.Fatalf("the peek answered (%v) before the download went quiet", err)
	}
	leave()
	if err := <-received; status.Code(err) != codes.Canceled {
		t.Fatalf("the caller that left got %v", err)
	}
	select {
	case <-stall.Left:
	case <-time.After(30 * time.Second):
		t.Fatal("the content peek still reads the stalled download 30 s after its caller left")
	}
}

func TestPeekContentOfADocumentWhoseDownloadBreaksEndsInAnError(t *testing.T) {
	docs, data := brokenDownloads(t)
	conn, _ := testConn(t, &recordingHub{bundle: timeSeriesBundle(1)}, WithDocuments(docs, time.Minute))
	msgs, err := receiveAll(t, messagehubv1.NewMessageHubClient(conn), &messagehubv1.PeekRequest{Recipient: recipient})
	var got []byte
	for _, m := range msgs {
		got = append(got, m.GetData()...)
	}
	if err == nil && !bytes.Equal(got, data) {
		t.Fatalf("the content peek ended OK with %d bytes of the %d-byte document; want an error", len(got), len(data))
	}
	if err == nil {
		t.Fatal("the whole document came through a proxy that cuts every answer after 256 KiB")
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v; want UNAVAILABLE, so that the actor peeks again", err)
	}
}
