package cosmos_test

import (
	"context"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/figures"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// Two instances share a database: the one that holds the figures lease
// keeps the figures; the other reads them and waits, until the holder
// gives the lease up.
func TestOneInstanceKeepsTheFigures(t *testing.T) {
	db := cosmostest.UniqueID("db")
	a, b := open(t, cosmos.Config{Database: db}), open(t, cosmos.Config{Database: db})
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	clock := &costClock{now: time.Now()}
	ka, kb := figures.New(a, figures.Options{Now: clock.Now}), figures.New(b, figures.Options{Now: clock.Now})
	ctx := context.Background()
	turn := func(k *figures.Keeper) bool {
		t.Helper()
		clock.advance(figures.DefaultEvery)
		done, err := k.Turn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return done
	}
	if !turn(ka) {
		t.Fatal("the first instance did not count the figures")
	}
	if turn(kb) {
		t.Fatal("the second instance updated the figures while the first holds the lease")
	}
	if !turn(ka) {
		t.Fatal("the holder did not update the figures a minute on")
	}
	f, err := b.ReadFigures(ctx, store.FigureTotals)
	if err != nil || f.ComputedAt.IsZero() || f.FullAt.IsZero() {
		t.Fatalf("the second instance reads %+v (%v); want the holder's figures", f, err)
	}
	if err := a.ReleaseFiguresLease(ctx, ""); err != nil { // another holder's release leaves it alone
		t.Fatal(err)
	}
	if turn(kb) {
		t.Fatal("the second instance took a lease still held")
	}
}
