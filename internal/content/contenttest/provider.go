// Package contenttest is a BundleContentProvider for tests: it answers as
// the test tells it (slowly, with an error, too much data, no media type)
// and counts what it was asked.
package contenttest

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/domain"
)

// Answer is what the provider does for one request: it sends chunks, then
// returns err. Hold, when set, is waited for (or the call's end) first;
// Stall, when set, after the chunks are sent, before err is returned.
// Call, when set, is given the call's context as the call starts: it ends
// as the provider hears that the hub stopped the call.
type Answer struct {
	Chunks []*messagehubv1.BundleContentChunk
	Err    error
	Hold   <-chan struct{}
	Stall  <-chan struct{}
	Call   func(context.Context)
}

// Provider is a BundleContentProvider on a loopback listener.
type Provider struct {
	messagehubv1.UnimplementedBundleContentProviderServer

	// Address is the provider's host:port.
	Address string

	mu           sync.Mutex
	answer       func(*messagehubv1.Bundle, int) Answer
	creates      map[string]int // bundle id → CreateBundleContent calls
	failDequeued int
	rejected     map[string]error // bundle id → the error every BundleDequeued of it returns
	told         chan *messagehubv1.Bundle
}

// Start serves a provider until the test ends. answer is called with the
// bundle and how many times it was asked before.
func Start(t testing.TB, answer func(b *messagehubv1.Bundle, calls int) Answer) *Provider {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{Address: lis.Addr().String(), answer: answer, creates: map[string]int{}, told: make(chan *messagehubv1.Bundle, 10_000)}
	// A provider takes the largest bundle the hub sends (provider.proto).
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	messagehubv1.RegisterBundleContentProviderServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return p
}

// Client returns a client of p that is closed when the test ends.
func (p *Provider) Client(t testing.TB) messagehubv1.BundleContentProviderClient {
	t.Helper()
	conn, err := grpc.NewClient(p.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return messagehubv1.NewBundleContentProviderClient(conn)
}

// Document answers a whole document in chunks of at most chunkSize bytes,
// the media type in the first.
func Document(mediaType string, data []byte, chunkSize int) Answer {
	chunks := []*messagehubv1.BundleContentChunk{{MediaType: mediaType}}
	for len(data) > 0 {
		n := min(chunkSize, len(data))
		last := chunks[len(chunks)-1]
		if len(last.Data) > 0 {
			last = &messagehubv1.BundleContentChunk{}
			chunks = append(chunks, last)
		}
		last.Data, data = data[:n], data[n:]
	}
	return Answer{Chunks: chunks}
}

// CreateBundleContent answers as the test said.
func (p *Provider) CreateBundleContent(req *messagehubv1.CreateBundleContentRequest, stream grpc.ServerStreamingServer[messagehubv1.BundleContentChunk]) error {
	p.mu.Lock()
	calls := p.creates[req.GetBundle().GetId()]
	p.creates[req.GetBundle().GetId()]++
	p.mu.Unlock()
	a := p.answer(req.GetBundle(), calls)
	if a.Call != nil {
		a.Call(stream.Context())
	}
	if a.Hold != nil {
		select {
		case <-a.Hold:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
	for _, c := range a.Chunks {
		if err := stream.Send(c); err != nil {
			return err
		}
	}
	if a.Stall != nil {
		select {
		case <-a.Stall:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
	return a.Err
}

// Creates is how many times the document of bundleID was asked for.
func (p *Provider) Creates(bundleID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.creates[bundleID]
}

// FailDequeued makes the next n BundleDequeued calls fail with UNAVAILABLE.
func (p *Provider) FailDequeued(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failDequeued = n
}

// RejectDequeued makes every BundleDequeued call of the bundle fail with
// err (a status error), as a domain that refuses that one bundle would;
// nil takes it again.
func (p *Provider) RejectDequeued(bundleID string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rejected == nil {
		p.rejected = map[string]error{}
	}
	if err == nil {
		delete(p.rejected, bundleID)
		return
	}
	p.rejected[bundleID] = err
}

// BundleDequeued hands the bundle to Told.
func (p *Provider) BundleDequeued(_ context.Context, req *messagehubv1.BundleDequeuedRequest) (*messagehubv1.BundleDequeuedResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.rejected[req.GetBundle().GetId()]; err != nil {
		return nil, err
	}
	if p.failDequeued > 0 {
		p.failDequeued--
		return nil, status.Error(codes.Unavailable, "provider down (test)")
	}
	p.told <- req.GetBundle()
	return &messagehubv1.BundleDequeuedResponse{}, nil
}

// Told delivers every bundle the provider was told of, as it is told.
func (p *Provider) Told() <-chan *messagehubv1.Bundle { return p.told }

// Documents is a content.Service over a temporary folder whose time series
// domain is p, for which every bundle counts as pending; it is closed when
// the test ends.
func (p *Provider) Documents(t testing.TB) *content.Service {
	t.Helper()
	store, err := content.OpenDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	docs := content.NewService(content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: p.Client(t)},
		Store:     store,
		Pending:   func(context.Context, string, string) (bool, error) { return true, nil },
	})
	t.Cleanup(func() { docs.Close(); _ = store.Close() })
	return docs
}

// Put stores data as the document of key in store, as a build would.
func Put(t testing.TB, store content.Store, key content.Key, mediaType string, data []byte) {
	t.Helper()
	staged, err := store.Create(t.Context(), key, mediaType)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := staged.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := staged.Commit(); err != nil {
		t.Fatal(err)
	}
}
