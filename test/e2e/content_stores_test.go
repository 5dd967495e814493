package e2e

import (
	"bytes"
	"net/http"
	"sync"
	"testing"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
)

// A document over gRPC and HTTP on each store: built once, the same bytes
// on both, its media type and bundle id in the HTTP headers, and the
// dequeue told to the domain.
func TestContentOverGRPCAndHTTP(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { testContentOverGRPCAndHTTP(t, contentStoreArgs(t, b.name, b.args())) })
	}
}

func testContentOverGRPCAndHTTP(t *testing.T, storeArgs []string) {
	document := bytes.Repeat([]byte(`{"series":[1,2,3]}`), 100_000) // 1.8 MB: two gRPC messages at least
	const mediaType = "application/json; charset=utf-8"
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document(mediaType, document, 300<<10)
	})
	h := startHTTPHub(t, append([]string{"--content-provider", "DOMAIN_TIME_SERIES=" + provider.Address}, storeArgs...)...)
	recipient := newID()
	q := "?recipient=" + recipient
	h.do(t, http.MethodPost, "/v1/notifications", "", saveRequest(notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"))).want(t, http.StatusOK)

	first, data, err := h.peekContent(t, recipient)
	if err != nil {
		t.Fatal(err)
	}
	bundleID := first.GetBundle().GetId()
	if first.GetMediaType() != mediaType || !bytes.Equal(data, document) {
		t.Fatalf("gRPC: %q with %d bytes, want %q with %d", first.GetMediaType(), len(data), mediaType, len(document))
	}
	r := h.do(t, http.MethodGet, "/v1/peek/content"+q, "", nil).want(t, http.StatusOK)
	if r.header.Get("Content-Type") != mediaType || r.header.Get("MessageId") != bundleID || !bytes.Equal(r.body, document) {
		t.Fatalf("HTTP: %q, MessageId %q, %d bytes; want %q, %s, the document", r.header.Get("Content-Type"), r.header.Get("MessageId"), len(r.body), mediaType, bundleID)
	}
	if n := provider.Creates(bundleID); n != 1 {
		t.Fatalf("the domain was asked %d times, want once", n)
	}

	h.do(t, http.MethodDelete, "/v1/dequeue/"+bundleID+q, "", nil).want(t, http.StatusOK)
	select {
	case told := <-provider.Told():
		if told.GetId() != bundleID || len(told.GetNotificationIds()) != 1 {
			t.Fatalf("told of %v, want the dequeued bundle %s", told, bundleID)
		}
	case <-ctxT(t).Done():
		t.Fatal("the domain was never told of the dequeue")
	}
	h.do(t, http.MethodGet, "/v1/peek/content"+q, "", nil).want(t, http.StatusNoContent)
}

// Two instances on one Cosmos DB database peek a bundle's content at once:
// the domain is asked once, and both serve its document.
func TestTwoCosmosInstancesAskTheDomainOnce(t *testing.T) {
	asked := make(chan struct{}, 10)
	release := make(chan struct{})
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		asked <- struct{}{}
		a := contenttest.Document("application/xml", []byte("<Document/>"), 4)
		a.Hold = release
		return a
	})
	var storeArgs []string
	for _, b := range backends {
		if b.name == "cosmos" {
			storeArgs = contentStoreArgs(t, b.name, b.args())
		}
	}
	args := append([]string{"--content-provider", "DOMAIN_TIME_SERIES=" + provider.Address, "--content-timeout", "50s"}, storeArgs...)
	hubs := []*hub{startHub(t, args...), startHub(t, args...)}
	recipient := newID()
	if _, err := hubs[0].client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{
		notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"),
	}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([]*messagehubv1.PeekContentChunk, len(hubs))
	for i, h := range hubs {
		wg.Go(func() {
			first, data, err := h.peekContent(t, recipient)
			if err != nil || string(data) != "<Document/>" {
				t.Errorf("instance %d: %q (%v)", i, data, err)
			}
			got[i] = first
		})
	}
	<-asked
	time.Sleep(time.Second) // both peeks are in: one asking, one waiting for the lease
	close(release)
	wg.Wait()
	if t.Failed() {
		return
	}
	id := got[0].GetBundle().GetId()
	if got[1].GetBundle().GetId() != id {
		t.Fatalf("the instances served bundles %s and %s", id, got[1].GetBundle().GetId())
	}
	if n := provider.Creates(id); n != 1 {
		t.Fatalf("the domain was asked %d times, want once", n)
	}
}
