package hub

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// cancellingStore cancels a caller's context as the group's write begins.
type cancellingStore struct {
	store.Store
	cancel context.CancelFunc
}

func (s *cancellingStore) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	s.cancel()
	return s.Store.CommitSaves(ctx, saves)
}

// One caller's cancelled context fails that caller's Save alone, and only
// while nothing of it is written: a caller gone before its group is planned
// is answered with its context's error and nothing of its Save is stored;
// one that goes while the group is written is stored with the others and
// answered so; either way the other callers' Saves are stored.
func TestACallersCancellationFailsOnlyItsOwnSaveBeforeItIsWritten(t *testing.T) {
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := &cancellingStore{Store: inner, cancel: func() {}}
	h := New(st, Options{SweepInterval: time.Hour}, nil)
	t.Cleanup(func() {
		h.Close()
		_ = inner.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	note := func() domain.Notification {
		return domain.Notification{ID: uuid.NewString(), Recipient: uuid.NewString(), Origin: domain.OriginCharges,
			ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: 1}
	}
	stored := func(n domain.Notification) bool {
		found, err := inner.LookupIDs(ctx, []string{n.ID})
		if err != nil {
			t.Fatal(err)
		}
		return len(found) == 1
	}

	for _, during := range []bool{false, true} {
		gone, leave := context.WithCancel(ctx)
		st.cancel = func() {}
		if during {
			st.cancel = leave
		} else {
			leave()
		}
		left, stays := note(), note()
		group := []*saveCall{
			{ctx: gone, notifications: []domain.Notification{left}, done: make(chan saveOutcome, 1)},
			{ctx: ctx, notifications: []domain.Notification{stays}, done: make(chan saveOutcome, 1)},
		}
		if finish := h.prepareGroup(group); finish != nil {
			finish()
		}
		l, s := <-group[0].done, <-group[1].done
		if s.err != nil || s.result.Saved != 1 || !stored(stays) {
			t.Fatalf("cancelled during the write %v: the other caller's Save: %+v, %v, stored %v", during, s.result, s.err, stored(stays))
		}
		switch {
		case during && (l.err != nil || l.result.Saved != 1 || !stored(left)):
			t.Fatalf("a caller gone while its Save was written: %+v, %v, stored %v; want it saved and answered so", l.result, l.err, stored(left))
		case !during && (!errors.Is(l.err, context.Canceled) || stored(left)):
			t.Fatalf("a caller gone before its group: %v, stored %v; want its context's error and nothing stored", l.err, stored(left))
		}
	}
}
