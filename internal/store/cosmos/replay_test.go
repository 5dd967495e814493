package cosmos_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// lossy delivers the first request that match accepts to the server and
// then loses its answer (503), as a dropped connection would: the store's
// transport sends it again, to find its own effect already there.
type lossy struct {
	next  *http.Client
	match func(req *http.Request, body string) bool
	lost  atomic.Int32
}

func (l *lossy) Do(req *http.Request) (*http.Response, error) {
	body := ""
	if req.Body != nil {
		raw, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		body = string(raw)
		req.Body = io.NopCloser(bytes.NewReader(raw))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
	}
	resp, err := l.next.Do(req)
	if err != nil || cosmos.Classify(req) == cosmos.OpMetadata || resp.StatusCode >= 300 ||
		!l.match(req, body) || !l.lost.CompareAndSwap(0, 1) {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return &http.Response{
		StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Request: req,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   io.NopCloser(bytes.NewReader([]byte(`{"code":"ServiceUnavailable","message":"answer lost"}`))),
	}, nil
}

// Every write whose answer is lost is sent again and meets its own effect
// (409 or 412): the store recognises it, so a save is stored once and
// visible at once, and a dequeue succeeds.
func TestReplayedWritesFindTheirOwnEffect(t *testing.T) {
	for _, tt := range []struct {
		name  string
		match func(req *http.Request, body string) bool
	}{
		{"reservation", func(req *http.Request, body string) bool {
			return toContainer(req, "recipients") && cosmos.Classify(req) == cosmos.OpBatch && strings.Contains(body, `"res":[`)
		}},
		{"page batch", func(req *http.Request, body string) bool {
			return toContainer(req, "drawers") && cosmos.Classify(req) == cosmos.OpBatch
		}},
		{"id document", func(req *http.Request, body string) bool {
			return toContainer(req, "ids") && cosmos.Classify(req) == cosmos.OpCreate
		}},
		{"commit", func(req *http.Request, body string) bool {
			return toContainer(req, "saves") && req.Method == http.MethodPut && strings.Contains(body, `"committed"`)
		}},
		{"dequeue", func(req *http.Request, body string) bool {
			return toContainer(req, "recipients") && cosmos.Classify(req) == cosmos.OpBatch && strings.Contains(body, `"dequeued"`)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := &lossy{next: cosmostest.NewHTTPClient(), match: tt.match}
			repo := hub.New(open(t, cosmos.Config{Transport: l}), hub.Options{}, nil)
			t.Cleanup(repo.Close)
			ctx := context.Background()
			r := uuid.NewString()
			ns := notifications(5, r, 1)
			res, err := repo.Save(ctx, ns)
			if err != nil || res.Saved != 5 {
				t.Fatalf("save = %+v, %v; want 5 saved", res, err)
			}
			b, err := repo.Peek(ctx, r, domain.GroupAll, "")
			if err != nil || b == nil || !slices.Equal(b.NotificationIDs, ids(ns)) {
				t.Fatalf("peek after the save = %v, %v; want all five", b, err)
			}
			if err := repo.Dequeue(ctx, r, b.ID); err != nil {
				t.Fatalf("dequeue: %v", err)
			}
			if l.lost.Load() == 0 {
				t.Fatal("no answer was lost; the test did not test anything")
			}
			if b, err := repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
				t.Fatalf("peek after the dequeue = %v, %v; want nothing", b, err)
			}
		})
	}
}

// Once a save's commit record says committed the save succeeded: when
// moving the watermark fails for a while it is retried until done, and the
// caller gets no error for a save that is stored.
func TestACommittedSaveNeverReturnsAnError(t *testing.T) {
	f := newFaulty()
	repo := hub.New(open(t, cosmos.Config{Transport: f}), hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	var failed atomic.Int32
	f.set(func(req *http.Request) int {
		// The finalize's replace of the head; the first three fail.
		if toContainer(req, "recipients") && req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/docs/head") &&
			failed.Add(1) <= 3 {
			return http.StatusForbidden
		}
		return 0
	})
	ns := notifications(4, r, 1)
	res, err := repo.Save(ctx, ns)
	if err != nil || res.Saved != 4 {
		t.Fatalf("save whose finalize failed three times = %+v, %v; want 4 saved", res, err)
	}
	if failed.Load() < 4 {
		t.Fatalf("the finalize was tried %d times; the test did not test anything", failed.Load())
	}
	b, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil || !slices.Equal(b.NotificationIDs, ids(ns)) {
		t.Fatalf("peek after the save = %v, %v; want all four", b, err)
	}
}
