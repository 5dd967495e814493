package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// While the data volume is below half of --min-free-disk every write is
// refused with RESOURCE_EXHAUSTED, HTTP 429 (docs/operations.md, "The disk
// guard"): a peek that would cut a new bundle, a dequeue, a remedy. The
// OpenAPI documents the gateway serves list every answer a client must
// handle, so they name the 429 of each route that gives it.
func TestTheOpenAPIDocumentsNameTheStorageFullAnswerOfEveryWrite(t *testing.T) {
	dir := t.TempDir()
	st, err := pebble.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	const reserve = 1 << 30
	var free atomic.Uint64
	free.Store(1 << 40)
	guard := diskguard.New(dir, reserve, func(string) (uint64, error) { return free.Load(), nil }, time.Hour, nil)
	t.Cleanup(guard.Close)
	web, h := serveAdminOf(t, diskguard.Store(st, guard), hub.Options{})

	ctx := context.Background()
	cut, waiting := uuid.NewString(), uuid.NewString()
	var ids []string
	for _, recipient := range []string{cut, cut, waiting} {
		ids = append(ids, uuid.NewString())
		if _, err := h.Save(ctx, []domain.Notification{{ID: ids[len(ids)-1], Recipient: recipient, Origin: domain.OriginCharges,
			ContentType: "rsm-031", DocumentType: "doc", Weight: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	pending, err := h.Peek(ctx, cut, domain.GroupAll, "")
	if err != nil || pending == nil {
		t.Fatalf("peek: %v, %v", pending, err)
	}

	free.Store(reserve/2 - 1)
	guard.Refresh()
	var docs struct {
		Paths map[string]map[string]struct {
			Responses map[string]any `json:"responses"`
		} `json:"paths"`
	}
	resp, err := http.Get(web.URL + "/openapi.v3.json")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&docs)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, path, route, body string }{
		{http.MethodGet, "/v1/peek?recipient=" + waiting, "/v1/peek", ""},
		{http.MethodGet, "/v1/peek/masterdata?recipient=" + waiting, "/v1/peek/masterdata", ""},
		{http.MethodGet, "/v1/peek/content?recipient=" + waiting, "/v1/peek/content", ""},
		{http.MethodDelete, "/v1/dequeue/" + pending.ID + "?recipient=" + cut, "/v1/dequeue/{bundleId}", ""},
		{http.MethodPost, "/admin/v1/recipients/" + cut + "/bundles/" + pending.ID + ":release",
			"/admin/v1/recipients/{recipient}/bundles/{bundleId}:release", `{"reason":"stuck"}`},
		{http.MethodPost, "/admin/v1/recipients/" + cut + ":acknowledge", "/admin/v1/recipients/{recipient}:acknowledge",
			`{"domain":"DOMAIN_CHARGES","contentType":"rsm-031","upToNotificationId":"` + ids[0] + `","reason":"ticket 4711"}`},
	} {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, web.URL+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("%s %s below the floor: %d %s; want 429", tc.method, tc.path, resp.StatusCode, body)
			continue
		}
		if _, ok := docs.Paths[tc.route][strings.ToLower(tc.method)].Responses["429"]; !ok {
			t.Errorf("%s %s answers 429 (%s), which the OpenAPI document does not list for it", tc.method, tc.route, body)
		}
	}
}
