package cosmos_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// savingSweepStore runs before, when set, between a visit's read and its
// writes: a save landing there changes the catalog the writes are
// conditional on.
type savingSweepStore struct {
	*cosmos.Store
	mu     sync.Mutex
	before func(context.Context) error
}

func (s *savingSweepStore) ApplySweep(ctx context.Context, sw store.Sweep) error {
	s.mu.Lock()
	before := s.before
	s.mu.Unlock()
	if before != nil {
		if err := before(ctx); err != nil {
			return err
		}
	}
	return s.Store.ApplySweep(ctx, sw)
}

func (s *savingSweepStore) interfere(before func(context.Context) error) {
	s.mu.Lock()
	s.before = before
	s.mu.Unlock()
}

// warningLog keeps the warnings logged.
type warningLog struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *warningLog) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn
}
func (l *warningLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}
func (l *warningLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *warningLog) WithGroup(string) slog.Handler      { return l }

// withMessage returns the attributes of each warning logged with msg.
func (l *warningLog) withMessage(msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.records {
		if r.Message != msg {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = fmt.Sprint(a.Value.Any()); return true })
		out = append(out, attrs)
	}
	return out
}

// A recipient whose visit of retention conflicts at every pass keeps its
// storage for good: the pass goes on with the others and tells nobody. A
// save landing between each visit's read of the catalog and its writes
// makes the visits conflict pass after pass; from the third in a row the
// sweeper warns, naming the recipient, what conflicted and how many
// visits, and counts the recipient in StuckSweeps, until a visit
// succeeds.
func TestARecipientWhoseSweepConflictsAtEveryPassIsReported(t *testing.T) {
	clock := &costClock{now: time.Now()}
	s := &savingSweepStore{Store: open(t, cosmos.Config{Database: cosmostest.UniqueID("db"), Now: clock.Now})}
	logs := &warningLog{}
	repo := hub.New(s, hub.Options{Now: clock.Now, Retention: 24 * time.Hour, SweepInterval: time.Hour}, slog.New(logs))
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, repo, r, ids(ns))
	// The dequeued bundle is due, and its drawer, older than the
	// retention, goes: each visit rewrites the cabinet's entry.
	clock.advance(25 * time.Hour)
	saves := 0
	s.interfere(func(ctx context.Context) error {
		saves++
		_, err := repo.Save(ctx, notifications(1, r, 1))
		return err
	})
	const stuckAfter = 3
	for pass := 1; pass <= stuckAfter; pass++ {
		if err := repo.SweepNow(ctx); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		warned := logs.withMessage(hub.SweepKeepsFailing)
		if pass < stuckAfter {
			if len(warned) != 0 || repo.StuckSweeps() != 0 {
				t.Fatalf("after %d conflicting passes: warnings %v, %d stuck; want none yet", pass, warned, repo.StuckSweeps())
			}
			continue
		}
		if len(warned) != 1 || warned[0]["recipient"] != r || warned[0]["visits"] != "3" {
			t.Fatalf("after %d conflicting passes the warnings are %v; want one naming recipient %s and 3 visits", pass, warned, r)
		}
		// What conflicted: the cabinet's entry, which the saves rewrote.
		if entry := fmt.Sprintf("e:%d:%s", ns[0].Origin, ns[0].ContentType); !strings.Contains(warned[0]["err"], entry) {
			t.Fatalf("the warning's error %q does not name the cabinet's entry %s", warned[0]["err"], entry)
		}
		if n := repo.StuckSweeps(); n != 1 {
			t.Fatalf("after %d conflicting passes %d recipients are counted stuck, want 1", pass, n)
		}
	}
	if saves != stuckAfter {
		t.Fatalf("%d saves landed in the visits, want one a pass", saves)
	}
	s.interfere(nil)
	if err := repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if n := repo.StuckSweeps(); n != 0 {
		t.Fatalf("after a visit that succeeded %d recipients are counted stuck, want 0", n)
	}
	if warned := logs.withMessage(hub.SweepKeepsFailing); len(warned) != 1 {
		t.Fatalf("warnings %v after the visit that succeeded; want the one before", warned)
	}
}
