package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
)

// An operator's remedies over the HTTP gateway, on each store: a released
// bundle is cut afresh under a new id by the actor's next Peek, and the
// notifications acknowledged on the actor's behalf are told to their domain
// as dequeued, in the bundles the answer names.
func TestRemediesOverHTTPTellTheDomain(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { testRemediesOverHTTPTellTheDomain(t, contentStoreArgs(t, b.name, b.args())) })
	}
}

func testRemediesOverHTTPTellTheDomain(t *testing.T, storeArgs []string) {
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("text/plain", []byte("x"), 1)
	})
	h := startHTTPHub(t, append([]string{"--content-provider", "DOMAIN_TIME_SERIES=" + provider.Address}, storeArgs...)...)
	recipient := newID()
	q := "?recipient=" + recipient
	var notes []*messagehubv1.DataAvailable
	for i := range 5 {
		n := notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")
		n.SupportsBundling = i != 1 // a bundle of one: the bundling rule holds on the actor's behalf too
		notes = append(notes, n)
	}
	h.do(t, http.MethodPost, "/v1/notifications", "", saveRequest(notes...)).want(t, http.StatusOK)

	peeked := h.do(t, http.MethodGet, "/v1/peek"+q, "", nil).bundle(t)
	var released struct {
		Released struct {
			BundleID string `json:"bundleId"`
		} `json:"released"`
	}
	r := h.do(t, http.MethodPost, "/admin/v1/recipients/"+recipient+"/bundles/"+peeked.GetId()+":release", "",
		map[string]string{"reason": "the actor lost its state"}).want(t, http.StatusOK)
	if err := json.Unmarshal(r.body, &released); err != nil || released.Released.BundleID != peeked.GetId() {
		t.Fatalf("release answered %s (%v)", r.body, err)
	}
	h.do(t, http.MethodDelete, "/v1/dequeue/"+peeked.GetId()+q, "", nil).want(t, http.StatusNotFound)
	again := h.do(t, http.MethodGet, "/v1/peek"+q, "", nil).bundle(t)
	if again.GetId() == peeked.GetId() || !slices.Equal(again.GetNotificationIds(), peeked.GetNotificationIds()) {
		t.Fatalf("peek after the release: %v, want %v under a new id", again, peeked.GetNotificationIds())
	}

	var acked struct {
		BundleIDs     []string `json:"bundleIds"`
		Notifications string   `json:"notifications"` // int64 is a JSON string
	}
	r = h.do(t, http.MethodPost, "/admin/v1/recipients/"+recipient+":acknowledge", "", map[string]string{
		"domain": "DOMAIN_TIME_SERIES", "contentType": "TimeSeries", "upToNotificationId": notes[3].GetId(), "reason": "ticket 4711",
	}).want(t, http.StatusOK)
	if err := json.Unmarshal(r.body, &acked); err != nil || acked.Notifications != "4" || len(acked.BundleIDs) != 3 || acked.BundleIDs[0] != again.GetId() {
		t.Fatalf("acknowledge answered %s (%v); want 4 notifications in 3 bundles, the pending %s first", r.body, err, again.GetId())
	}
	told := map[string][]string{}
	ctx := ctxT(t)
	for len(told) < len(acked.BundleIDs) {
		select {
		case b := <-provider.Told():
			told[b.GetId()] = b.GetNotificationIds()
		case <-ctx.Done():
			t.Fatalf("the domain was told of %d of the bundles %v", len(told), acked.BundleIDs)
		}
	}
	var dequeued []string
	for _, id := range acked.BundleIDs {
		dequeued = append(dequeued, told[id]...)
	}
	want := []string{notes[0].GetId(), notes[1].GetId(), notes[2].GetId(), notes[3].GetId()}
	if !slices.Equal(dequeued, want) {
		t.Fatalf("the domain was told of %v, want %v", dequeued, want)
	}
	if b := h.do(t, http.MethodGet, "/v1/peek"+q, "", nil).bundle(t); !slices.Equal(b.GetNotificationIds(), []string{notes[4].GetId()}) {
		t.Fatalf("the actor's next bundle: %v", b)
	}
	// A bad request changes nothing.
	h.do(t, http.MethodPost, "/admin/v1/recipients/"+recipient+":acknowledge", "", map[string]string{
		"domain": "DOMAIN_TIME_SERIES", "contentType": "TimeSeries", "upToNotificationId": notes[4].GetId(),
	}).want(t, http.StatusBadRequest)
	h.do(t, http.MethodGet, "/v1/peek"+q, "", nil).bundle(t)
}
