package cosmos_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// transportFunc is a transport that is a function.
type transportFunc func(*http.Request) (*http.Response, error)

func (f transportFunc) Do(req *http.Request) (*http.Response, error) { return f(req) }

// A save over two recipients: the reserve batch of the first is on its way
// when the second's is refused, so the save gives up on the first's
// (its context ends: a deadline or a lost answer) and aborts. Its rollback
// finds no reservation in the first recipient's head, and only then does
// the batch arrive and apply, as a request delayed in the network does. A
// reservation of an aborted save must not appear behind its rollback: it
// would hold the recipient's watermark below every later save until the
// lease ends, so that Peeks miss notifications whose Saves were answered.
func TestAReserveBatchArrivingAfterItsSavesRollbackHoldsNothing(t *testing.T) {
	db := cosmostest.UniqueID("db")
	x, y := uuid.NewString(), uuid.NewString()
	var armed, recordSent atomic.Bool
	xHeld := make(chan struct{})
	var once sync.Once
	var late *http.Request
	var lateBody []byte
	next := cosmostest.NewHTTPClient()
	transport := transportFunc(func(req *http.Request) (*http.Response, error) {
		if armed.Load() && toContainer(req, "saves") && req.Method == http.MethodPost {
			recordSent.Store(true)
		}
		if !recordSent.Load() {
			return next.Do(req)
		}
		switch {
		case isBatch(req, "recipients", x):
			held := false
			once.Do(func() { held = true })
			if !held {
				return next.Do(req)
			}
			raw, err := io.ReadAll(req.Body)
			if err != nil {
				t.Error(err)
			}
			late, lateBody = req.Clone(context.Background()), raw
			close(xHeld)
			<-req.Context().Done() // the save gives up on it
			return nil, req.Context().Err()
		case isBatch(req, "recipients", y):
			<-xHeld
			return injected(req, http.StatusForbidden), nil
		}
		return next.Do(req)
	})
	repo := hub.New(open(t, cosmos.Config{Database: db, Transport: transport}), hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	before := notifications(2, x, 1) // x has a head: the reserve batch replaces it
	if _, err := repo.Save(ctx, before); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, repo, x, ids(before))
	armed.Store(true)
	if _, err := repo.Save(ctx, append(notifications(2, x, 1), notifications(2, y, 1)...)); err == nil {
		t.Fatal("the save succeeded though a reservation was refused")
	}
	if late == nil {
		t.Fatal("the first recipient's reserve batch was not held; the test tested nothing")
	}
	// The batch arrives now, after the rollback.
	late.Body = io.NopCloser(bytes.NewReader(lateBody))
	late.ContentLength = int64(len(lateBody))
	resp, err := next.Do(late)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	t.Logf("the late reserve batch answered %d", resp.StatusCode)
	after := notifications(2, x, 1)
	if _, err := repo.Save(ctx, after); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, repo, x, ids(after))
}
