package hub

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// keptWarnings collects the warnings a warnings handler sent on records.
func keptWarnings(records <-chan slog.Record, msg string, into *[]string) []string {
	for {
		select {
		case r := <-records:
			if r.Message == msg {
				line := r.Message
				r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
				*into = append(*into, line)
			}
		default:
			return *into
		}
	}
}

// beforeSweepStore runs before between a visit's read and its writes.
type beforeSweepStore struct {
	store.Store
	before func(context.Context) error
}

func (s beforeSweepStore) ApplySweep(ctx context.Context, sw store.Sweep) error {
	if err := s.before(ctx); err != nil {
		return err
	}
	return s.Store.ApplySweep(ctx, sw)
}

// sweepInterferedHub is a hub over an embedded store in which before runs
// between each visit's read and its writes, given the hub.
func sweepInterferedHub(t *testing.T, opts Options, logger *slog.Logger, before func(context.Context, *Hub) error) (*Hub, store.Store) {
	t.Helper()
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var h *Hub
	h = New(beforeSweepStore{Store: inner, before: func(ctx context.Context) error { return before(ctx, h) }}, opts, logger)
	t.Cleanup(func() {
		h.Close()
		_ = inner.Close()
	})
	return h, inner
}

// The embedded store's sweep conflicts as Cosmos DB's does, and is
// reported the same: a save landing in every visit of a recipient makes
// each conflict, and from the stuckAfter-th in a row the sweeper warns,
// naming the recipient and the entry that changed, and counts it until a
// visit succeeds.
func TestAnEmbeddedStoresSweepThatKeepsConflictingIsReported(t *testing.T) {
	clock := &testClock{now: time.UnixMilli(1_700_000_000_000)}
	r := uuid.NewString()
	var interfere atomic.Bool
	records := make(chan slog.Record, 64)
	var warned []string
	h, _ := sweepInterferedHub(t, Options{Retention: 24 * time.Hour, SweepInterval: time.Hour, Now: clock.Now}, slog.New(warnings{records}),
		func(ctx context.Context, h *Hub) error {
			if !interfere.Load() {
				return nil
			}
			_, err := h.Save(ctx, dropDelayNotes(1, r))
			return err
		})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := h.Save(ctx, dropDelayNotes(3, r)); err != nil {
		t.Fatal(err)
	}
	drainOne(ctx, t, h, r)
	clock.Advance(25 * time.Hour) // the bundle is due, its drawer older than the retention
	interfere.Store(true)
	for pass := 1; pass <= stuckAfter; pass++ {
		if err := h.SweepNow(ctx); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		keptWarnings(records, SweepKeepsFailing, &warned)
		if want := pass / stuckAfter; len(warned) != want || h.StuckSweeps() != want {
			t.Fatalf("after %d conflicting passes: warnings %v, %d stuck; want %d", pass, warned, h.StuckSweeps(), want)
		}
	}
	if !strings.Contains(warned[0], r) || !strings.Contains(warned[0], "catalog entry") {
		t.Fatalf("the warning %q does not name the recipient and its entry", warned[0])
	}
	interfere.Store(false)
	if err := h.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.StuckSweeps(); n != 0 {
		t.Fatalf("after a visit that succeeded %d recipients are counted stuck, want 0", n)
	}
}
