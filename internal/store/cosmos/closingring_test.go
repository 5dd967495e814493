package cosmos_test

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// ringInFlightAtClose is a store whose first ring of the bell is still in
// flight when its hub closes: it reaches Cosmos DB only once the hub's
// context for it has ended, as a request that was under way then.
type ringInFlightAtClose struct {
	*cosmos.Store
	once    sync.Once
	entered chan struct{}
}

func (s *ringInFlightAtClose) RingBell(ctx context.Context, recipients []string) error {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.entered)
		<-ctx.Done()
	}
	return s.Store.RingBell(ctx, recipients)
}

// The bell of a Save whose ring is under way when its hub closes (the last
// groups of a shutdown commit just before it) is still rung: a Peek waiting
// on another instance for it is woken, as for any other Save. Without that,
// closing cut the ring short, and its recipients were rung by nobody.
func TestARingInFlightWhenTheHubClosesStillRings(t *testing.T) {
	db := cosmostest.UniqueID("db")
	a := &ringInFlightAtClose{Store: open(t, cosmos.Config{Database: db}), entered: make(chan struct{})}
	b := open(t, cosmos.Config{Database: db})
	defer func() { _ = b.Close() }()
	ctx := context.Background()
	_, cursor, err := b.ReadBells(ctx, "") // the present
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(a, hub.Options{}, nil)
	recipient := uuid.NewString()
	if _, err := h.Save(ctx, notifications(1, recipient, 1)); err != nil {
		t.Fatal(err)
	}
	<-a.entered
	h.Close()
	_ = a.Close()
	readUntil(t, b, cursor, recipient)
}
