// Package storetest is the contract suite every store.Store backend
// passes, in two layers: RunStore checks each Store method's promise
// directly, RunRepository checks the algorithm (a Repository) over the store.
// It is test code: only _test.go files import it.
package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// Factory opens a new, empty store for one test. The suite closes it.
type Factory func(t *testing.T) store.Store

// open opens a store for t and closes it when t ends.
func open(t *testing.T, newStore Factory) store.Store {
	t.Helper()
	store := newStore(t)
	t.Cleanup(func() {
		if err := store.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return store
}

// clock is a fake time source: every reading is a millisecond later than the
// one before, and tests can jump ahead.
type clock struct{ now atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.now.Add(int64(time.Millisecond))) }
func (c *clock) Advance(d time.Duration) { c.now.Add(int64(d)) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func newRecipient() string { return uuid.NewString() }

// note builds a valid notification; adjust fields on the result.
func note(recipient string, origin domain.Origin, contentType string) domain.Notification {
	return domain.Notification{
		ID: uuid.NewString(), Recipient: recipient, Origin: origin, ContentType: contentType,
		DocumentType: contentType, SupportsBundling: true, Weight: 1,
	}
}

func notes(n int, recipient string, origin domain.Origin, contentType string) []domain.Notification {
	out := make([]domain.Notification, n)
	for i := range out {
		out[i] = note(recipient, origin, contentType)
	}
	return out
}

func ids(ns []domain.Notification) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}

func expectIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %d ids, want %d; first difference at %d", what, len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func expectErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

// fingerprintOf stands in for the repository's fingerprint: stores keep it
// opaque, so any value that differs between notifications will do.
func fingerprintOf(n domain.Notification) store.Fingerprint {
	sum := sha256.Sum256(fmt.Appendf(nil, "%+v", n))
	return store.Fingerprint(sum[:16])
}

// planSave plans the store write of one recipient's new notifications as the
// repository does (hub.PlanSave). Tests change the plan to break a
// promise on purpose.
func planSave(recipient string, state store.RecipientState, ns []domain.Notification, at int64) store.RecipientSave {
	fps := make(map[string]store.Fingerprint, len(ns))
	for _, n := range ns {
		fps[n.ID] = fingerprintOf(n)
	}
	return hub.PlanSave(recipient, state, ns, fps, uuid.NewString, at, 0)
}
