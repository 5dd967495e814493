package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/gateway"
)

// waitForWaiter holds the test until the hub has a waiting peek registered
// (its count is the hub's own test hook); a peek registers before it looks,
// so a Save after this is found either by that look or by the wake-up.
func (s *stack) waitForWaiter(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.repo.Waiting() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no peek began to wait")
		}
		time.Sleep(time.Millisecond)
	}
}

// GET /v1/peek?wait= and the per-group routes wait for a Save and answer
// its bundle.
func TestAPeekWaitsOverHTTP(t *testing.T) {
	s := newStack(t)
	for _, route := range []string{"/v1/peek", "/v1/peek/masterdata"} {
		recipient := uuid.NewString()
		answers := make(chan answer, 1)
		go func() {
			resp, _ := get(t, s.url+route+"?recipient="+recipient+"&wait=20s")
			answers <- resp
		}()
		s.waitForWaiter(t)
		s.saveOne(t, recipient, domain.OriginCharges)
		resp := <-answers
		if resp.StatusCode != http.StatusOK || resp.Header.Get(gateway.MessageIDHeader) == "" {
			t.Fatalf("%s?wait=20s after a save: %d %v, want 200 with the bundle", route, resp.StatusCode, resp.Header)
		}
	}
}

// With nothing to deliver the answer is 204 once the wait is over, on every
// peek route.
func TestAPeekWithNothingIs204AfterItsWait(t *testing.T) {
	s := newStack(t)
	recipient := uuid.NewString()
	for _, route := range []string{"/v1/peek", "/v1/peek/timeseries", "/v1/peek/content"} {
		start := time.Now()
		resp, _ := get(t, s.url+route+"?recipient="+recipient+"&wait=200ms")
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("%s?wait=200ms: %d, want 204", route, resp.StatusCode)
		}
		if took := time.Since(start); took < 200*time.Millisecond {
			t.Fatalf("%s?wait=200ms answered after %s", route, took)
		}
	}
}

// A wait that is no duration, negative, over 30 s, repeated, or spelt as
// the request field is 400, naming the parameter.
func TestABadWaitIs400(t *testing.T) {
	s := newStack(t)
	recipient := uuid.NewString()
	for _, query := range []string{"wait=20", "wait=soon", "wait=-1s", "wait=31s", "wait=1s&wait=2s", "waitMs=1000", "wait_ms=1000"} {
		for _, route := range []string{"/v1/peek", "/v1/peek/aggregations", "/v1/peek/content"} {
			resp, e := call(t, newRequest(t, http.MethodGet, s.url+route+"?recipient="+recipient+"&"+query, nil))
			name := query[:strings.Index(query, "=")]
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Message, `"`+name+`"`) {
				t.Errorf("%s?%s: %d %q; want 400 naming %q", route, query, resp.StatusCode, e.Message, name)
			}
		}
	}
}

// The OpenAPI documents name the wait as the gateway takes it, on every
// peek route, and never the request field's own name.
func TestTheOpenAPIDocumentsNameTheWait(t *testing.T) {
	s := newStack(t)
	for _, doc := range []string{"/openapi.json", "/openapi.v3.json"} {
		_, body := get(t, s.url+doc)
		var d struct {
			Paths map[string]struct {
				Get struct {
					Parameters []struct {
						Name string `json:"name"`
						In   string `json:"in"`
					} `json:"parameters"`
				} `json:"get"`
			} `json:"paths"`
		}
		if err := json.Unmarshal(body, &d); err != nil {
			t.Fatal(err)
		}
		for _, route := range []string{"/v1/peek", "/v1/peek/timeseries", "/v1/peek/aggregations", "/v1/peek/masterdata", "/v1/peek/content"} {
			var names []string
			for _, p := range d.Paths[route].Get.Parameters {
				names = append(names, p.Name)
			}
			if !slices.Contains(names, "wait") || slices.Contains(names, "waitMs") {
				t.Errorf("%s GET %s takes %v, want wait and no waitMs", doc, route, names)
			}
		}
	}
}

// A client that goes away while its peek waits takes the wait with it, on
// every peek route: the hub no longer holds its waiter (nor the call's
// goroutines), rather than until the wait would have ended.
func TestAPeekWhoseClientLeavesStopsWaiting(t *testing.T) {
	s := newStack(t)
	for _, route := range []string{"/v1/peek", "/v1/peek/timeseries", "/v1/peek/content"} {
		conn, err := dialSmall(t.Context(), strings.TrimPrefix(s.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintf(conn, "GET %s?recipient=%s&wait=30s HTTP/1.1\r\nHost: hub\r\n\r\n", route, uuid.NewString()); err != nil {
			t.Fatal(err)
		}
		s.waitForWaiter(t)
		_ = conn.Close()
		// Well before the 30 s wait is over: the leaving client ends it.
		deadline := time.Now().Add(20 * time.Second)
		for s.repo.Waiting() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the hub still holds the peek of a client gone 20 s ago", route)
			}
			time.Sleep(time.Millisecond)
		}
	}
}
