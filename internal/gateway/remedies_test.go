package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// The remedies are POST routes of custom methods (…:release,
// …:acknowledge) with a JSON body; the path without its verb, or another
// method on it, is no remedy.
func TestRemedyRoutes(t *testing.T) {
	web, h := serveAdmin(t, hub.Options{MaxBundleWeight: 2})
	ctx := context.Background()
	recipient := uuid.NewString()
	ns := make([]domain.Notification, 3)
	for i := range ns {
		ns[i] = domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges,
			ContentType: "rsm-031", DocumentType: "doc", SupportsBundling: true, Weight: 1}
	}
	if _, err := h.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	peeked, err := h.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || peeked == nil {
		t.Fatalf("peek: %v, %v", peeked, err)
	}
	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, web.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	bundlePath := "/admin/v1/recipients/" + recipient + "/bundles/" + peeked.ID
	for _, tc := range []struct {
		what, method, path, body string
		want                     int
	}{
		{"release without a reason", http.MethodPost, bundlePath + ":release", `{}`, http.StatusBadRequest},
		{"release with an unknown field", http.MethodPost, bundlePath + ":release", `{"reason":"x","force":true}`, http.StatusBadRequest},
		{"a bundle path without the verb", http.MethodPost, bundlePath, `{"reason":"x"}`, http.StatusNotFound},
		{"GET on a bundle path without the verb", http.MethodGet, bundlePath, ``, http.StatusNotFound},
		{"another verb", http.MethodPost, bundlePath + ":delete", `{"reason":"x"}`, http.StatusNotFound},
		{"GET on the release", http.MethodGet, bundlePath + ":release", ``, http.StatusMethodNotAllowed},
		{"GET on the acknowledge", http.MethodGet, "/admin/v1/recipients/" + recipient + ":acknowledge", ``, http.StatusMethodNotAllowed},
		{"acknowledge of another recipient's notification", http.MethodPost, "/admin/v1/recipients/" + uuid.NewString() + ":acknowledge",
			`{"domain":"DOMAIN_CHARGES","contentType":"rsm-031","upToNotificationId":"` + ns[0].ID + `","reason":"x"}`, http.StatusNotFound},
	} {
		if code, body := call(tc.method, tc.path, tc.body); code != tc.want {
			t.Errorf("%s: %d %s; want %d", tc.what, code, body, tc.want)
		}
	}
	if pending, err := h.IsPending(ctx, recipient, peeked.ID); err != nil || !pending {
		t.Fatalf("the refused calls changed the pending bundle: %v, %v", pending, err)
	}

	code, body := call(http.MethodPost, bundlePath+":release", `{"reason":"stuck since Monday"}`)
	if code != http.StatusOK || !strings.Contains(body, `"bundleId":"`+peeked.ID+`"`) {
		t.Fatalf("release: %d %s", code, body)
	}
	if code, body := call(http.MethodPost, bundlePath+":release", `{"reason":"again"}`); code != http.StatusNotFound {
		t.Fatalf("a second release: %d %s", code, body)
	}
	code, body = call(http.MethodPost, "/admin/v1/recipients/"+recipient+":acknowledge",
		`{"domain":"DOMAIN_CHARGES","contentType":"rsm-031","upToNotificationId":"`+ns[2].ID+`","reason":"ticket 4711"}`)
	var acked struct {
		BundleIDs     []string `json:"bundleIds"`
		Notifications string   `json:"notifications"`
	}
	if err := json.Unmarshal([]byte(body), &acked); code != http.StatusOK || err != nil || len(acked.BundleIDs) != 2 || acked.Notifications != "3" {
		t.Fatalf("acknowledge: %d %s (%v)", code, body, err)
	}
	if b, err := h.Peek(ctx, recipient, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("peek after acknowledging everything: %v, %v", b, err)
	}
}
