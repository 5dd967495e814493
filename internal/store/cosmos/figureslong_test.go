package cosmos_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/figures"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// longRecount is a store whose recount takes longer than the figures
// lease on the clock (a large container at low priority): it lets the
// clock run past the lease, in two halves, and between them waits for the
// holder to extend its lease; at the end, another instance takes a turn.
type longRecount struct {
	*cosmos.Store
	clock     *costClock
	lease     time.Duration
	holds     chan struct{}
	scanning  chan struct{}
	other     func() (bool, error)
	otherDone bool
	otherErr  error
}

func (s *longRecount) HoldFiguresLease(ctx context.Context, holder string, d time.Duration) (bool, error) {
	held, err := s.Store.HoldFiguresLease(ctx, holder, d)
	select {
	case <-s.scanning:
		select {
		case s.holds <- struct{}{}:
		default:
		}
	default:
	}
	return held, err
}

func (s *longRecount) ScanBacklog(ctx context.Context, fn func(store.RecipientRecords) error) (float64, error) {
	s.clock.advance(s.lease * 3 / 5)
	close(s.scanning)
	select {
	case <-s.holds:
	case <-time.After(10 * time.Second): // only a keeper that never extends waits this long
	}
	s.clock.advance(s.lease * 3 / 5) // past the lease as taken before the recount
	s.otherDone, s.otherErr = s.other()
	return s.Store.ScanBacklog(ctx, fn)
}

// A recount that takes longer than the figures lease (at 100,000
// recipients about 200,000 RU at low priority) keeps the lease: its holder
// extends it while the recount runs. Taken over half-way by another
// instance, whose own recount is as long, the figures were never written:
// each holder's write was refused after the next took over, and the
// instances took turns recounting for ever.
func TestARecountLongerThanTheLeaseKeepsIt(t *testing.T) {
	db := cosmostest.UniqueID("db")
	clock := &costClock{now: time.Now()}
	a := open(t, cosmos.Config{Database: db, Now: clock.Now})
	b := open(t, cosmos.Config{Database: db, Now: clock.Now})
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	h := hub.New(withoutBells{open(t, cosmos.Config{Database: db})}, hub.Options{}, nil)
	t.Cleanup(h.Close)
	ctx := context.Background()
	r := uuid.NewString()
	if _, err := h.Save(ctx, notifications(2, r, 1)); err != nil {
		t.Fatal(err)
	}
	const every = 50 * time.Millisecond // the keepers' turns, and so their lease (5 turns)
	kb := figures.New(b, figures.Options{Every: every, Now: clock.Now})
	slow := &longRecount{Store: a, clock: clock, lease: 5 * every, holds: make(chan struct{}), scanning: make(chan struct{}),
		other: func() (bool, error) { return kb.Turn(ctx) }}
	ka := figures.New(slow, figures.Options{Every: every, Now: clock.Now})
	done, err := ka.Turn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slow.otherErr != nil || slow.otherDone {
		t.Errorf("another instance took the lease over during the recount: %v (%v)", slow.otherDone, slow.otherErr)
	}
	if !done {
		t.Fatal("the recount's figures were not written: its lease was taken over while it counted")
	}
	f, err := a.ReadFigures(ctx, store.FigureLists)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Largest) != 1 || f.Largest[0].Recipient != r || f.Largest[0].Waiting != 2 {
		t.Fatalf("figures %+v; want the recipient with 2 waiting", f.Largest)
	}
}
