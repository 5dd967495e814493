package hub

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// A group the store refuses as too large is split down to the call that
// does not fit, which fails alone; every other call is stored exactly once,
// in order, and its duplicates and conflicts are judged against what was
// in fact stored: an id of the refused call is new to a later call, an id
// of an earlier stored call is its duplicate or conflict.
func TestAGroupSplitOnTooLargeStoresEveryOtherCallOnce(t *testing.T) {
	st, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := New(st, Options{SweepInterval: time.Hour}, nil)
	t.Cleanup(func() {
		h.Close()
		_ = st.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	note := func(recipient string) domain.Notification {
		return domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges,
			ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: 1}
	}
	r1, r2 := uuid.NewString(), uuid.NewString()
	a1, a2, c1 := note(r1), note(r1), note(r1)
	big := []domain.Notification{note(r1), note(r1), note(r1), note(r1), note(r1)}
	other := a1
	other.Weight = 2 // a1's id with other content
	moved := big[0]
	moved.Recipient = r2 // big[0]'s id, for r2: new, as big is not stored
	calls := []*saveCall{
		{ctx: ctx, notifications: []domain.Notification{a1, a2}},
		{ctx: ctx, notifications: big},
		{ctx: ctx, notifications: []domain.Notification{a1, c1}},
		{ctx: ctx, notifications: []domain.Notification{moved}},
		{ctx: ctx, notifications: []domain.Notification{other}},
	}
	// The store's limit: a write of more than four notifications.
	const limit = 4
	refused := 0
	write := func(saves []store.RecipientSave) error {
		n := 0
		for _, s := range saves {
			n += len(s.IDs)
		}
		if n > limit {
			refused++
			return store.ErrTooLarge
		}
		return st.CommitSaves(ctx, saves)
	}
	outcomes := h.commitSplitting(ctx, calls, write)
	if refused < 2 {
		t.Fatalf("the store refused %d writes: the group was not split", refused)
	}
	want := []struct {
		saved, dups int
		err         error
	}{{2, 0, nil}, {0, 0, store.ErrTooLarge}, {1, 1, nil}, {1, 0, nil}, {0, 0, domain.ErrNotificationConflict}}
	if len(outcomes) != len(want) {
		t.Fatalf("%d outcomes for %d calls", len(outcomes), len(want))
	}
	for i, w := range want {
		o := outcomes[i]
		if (w.err == nil) != (o.err == nil) || (w.err != nil && !errors.Is(o.err, w.err)) {
			t.Errorf("call %d: error %v, want %v", i, o.err, w.err)
		}
		if o.err == nil && (o.result.Saved != w.saved || o.result.Duplicates != w.dups) {
			t.Errorf("call %d: %+v, want %d saved, %d duplicates", i, o.result, w.saved, w.dups)
		}
	}
	for r, ids := range map[string][]string{r1: {a1.ID, a2.ID, c1.ID}, r2: {moved.ID}} {
		b, err := h.Peek(ctx, r, domain.GroupAll, "")
		if err != nil || b == nil {
			t.Fatalf("peek %s: %v, %v", r, b, err)
		}
		if !slices.Equal(b.NotificationIDs, ids) {
			t.Errorf("recipient %s holds %v, want %v", r, b.NotificationIDs, ids)
		}
	}
}
