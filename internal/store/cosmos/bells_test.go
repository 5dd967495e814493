package cosmos_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// readUntil reads a's bells from cursor until every one of want has come
// (the test server's replicas lag up to 200 ms), and returns the cursor.
func readUntil(t *testing.T, a *cosmos.Store, cursor string, want ...string) string {
	t.Helper()
	missing := slices.Clone(want)
	deadline := time.Now().Add(30 * time.Second)
	for len(missing) > 0 {
		got, next, err := a.ReadBells(context.Background(), cursor)
		if err != nil {
			t.Fatalf("ReadBells: %v", err)
		}
		cursor = next
		missing = slices.DeleteFunc(missing, func(r string) bool { return slices.Contains(got, r) })
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s the bells of %v have not come", missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cursor
}

// Two instances on one database: a bell one rings is read by the other,
// from where its reader stood; the bells rung before the reader started are
// not.
func TestABellRungByOneInstanceIsReadByTheOther(t *testing.T) {
	db := cosmostest.UniqueID("db")
	a := open(t, cosmos.Config{Database: db})
	b := open(t, cosmos.Config{Database: db})
	defer func() { _ = a.Close(); _ = b.Close() }()
	ctx := context.Background()

	old := uuid.NewString()
	if err := b.RingBell(ctx, []string{old}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // past the replicas' lag: the bell is in the feed
	got, cursor, err := a.ReadBells(ctx, "")
	if err != nil || len(got) != 0 {
		t.Fatalf("the first ReadBells: %v, %v; want no recipients, only the present", got, err)
	}
	r1, r2 := uuid.NewString(), uuid.NewString()
	if err := b.RingBell(ctx, []string{r1, r2}); err != nil {
		t.Fatal(err)
	}
	cursor = readUntil(t, a, cursor, r1, r2)
	// Later bells come from the cursor on; the earlier ones are behind it.
	r3 := uuid.NewString()
	if err := b.RingBell(ctx, []string{r3}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, next, err := a.ReadBells(ctx, cursor)
		if err != nil {
			t.Fatal(err)
		}
		cursor = next
		if slices.Contains(got, old) || slices.Contains(got, r1) {
			t.Fatalf("read %v again: bells behind the cursor came back", got)
		}
		if slices.Contains(got, r3) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the third bell has not come")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A group of more recipients than one bell names rings several, and every
// recipient comes.
func TestABellOfManyRecipientsIsSplit(t *testing.T) {
	db := cosmostest.UniqueID("db")
	a := open(t, cosmos.Config{Database: db})
	b := open(t, cosmos.Config{Database: db})
	defer func() { _ = a.Close(); _ = b.Close() }()
	_, cursor, err := a.ReadBells(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, 1234)
	for i := range many {
		many[i] = uuid.NewString()
	}
	before := b.Meter().Snapshot()[cosmos.OpCreate].Requests
	if err := b.RingBell(context.Background(), many); err != nil {
		t.Fatal(err)
	}
	if n := b.Meter().Snapshot()[cosmos.OpCreate].Requests - before; n != 3 {
		t.Fatalf("a bell of 1,234 recipients took %d creates, want 3 of at most 500", n)
	}
	readUntil(t, a, cursor, many...)
}

// What following the bells costs: a poll that finds nothing is one request
// (the test server has one partition key range) and no metadata request; a
// bell is one create. The charges are printed for docs/cosmos.md.
func TestAnIdlePollOfTheBellsIsOneRequestPerRange(t *testing.T) {
	db := cosmostest.UniqueID("db")
	// Unthrottled: a 429's retry would count as a request.
	a := open(t, cosmos.Config{Database: db, Throughput: "manual=1000000"})
	b := open(t, cosmos.Config{Database: db, Throughput: "manual=1000000"})
	defer func() { _ = a.Close(); _ = b.Close() }()
	ctx := context.Background()
	_, cursor, err := a.ReadBells(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	r := uuid.NewString()
	if err := b.RingBell(ctx, []string{r}); err != nil {
		t.Fatal(err)
	}
	ring := b.Meter().Snapshot()[cosmos.OpCreate]
	cursor = readUntil(t, a, cursor, r)
	for range 3 {
		before := a.Meter().Snapshot()
		got, next, err := a.ReadBells(ctx, cursor)
		if err != nil {
			t.Fatal(err)
		}
		cursor = next
		after := a.Meter().Snapshot()
		reads := after[cosmos.OpRead].Requests - before[cosmos.OpRead].Requests
		meta := after[cosmos.OpMetadata].Requests - before[cosmos.OpMetadata].Requests
		charge := after[cosmos.OpRead].RequestCharge - before[cosmos.OpRead].RequestCharge
		if len(got) > 0 {
			continue // the bell came on a lagging replica only now
		}
		// The change feed is read range by range: one request per
		// partition key range of the container.
		ranges, err := server.Ranges(db, "bells")
		if err != nil {
			t.Fatal(err)
		}
		if reads != int64(len(ranges)) || meta != 0 {
			t.Fatalf("an idle poll of the bells made %d feed reads and %d metadata requests, want %d (one per partition key range) and 0", reads, meta, len(ranges))
		}
		t.Logf("idle poll: %d requests (one per range), %.2f RU; a bell of one recipient: 1 create, %.2f RU", reads, charge, ring.RequestCharge)
		return
	}
	t.Fatal("no idle poll in three")
}

// A failed read of the bells (the feed refused) leaves the cursor valid:
// once the feed answers again, the bells rung meanwhile come.
func TestAFailedReadOfTheBellsMissesNothing(t *testing.T) {
	db := cosmostest.UniqueID("db")
	a := open(t, cosmos.Config{Database: db})
	b := open(t, cosmos.Config{Database: db})
	defer func() { _ = a.Close(); _ = b.Close() }()
	ctx := context.Background()
	_, cursor, err := a.ReadBells(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := server.AddFaults(cosmostest.Fault{Kind: cosmostest.Refuse503, Ops: []string{"readfeed"}, DB: db, Coll: "bells"}); err != nil {
		t.Fatal(err)
	}
	r := uuid.NewString()
	if err := b.RingBell(ctx, []string{r}); err != nil {
		t.Fatal(err)
	}
	if got, next, err := a.ReadBells(ctx, cursor); err == nil {
		t.Fatalf("ReadBells with the feed refused: %v, no error", got)
	} else if next != cursor {
		t.Fatalf("a failed ReadBells moved the cursor")
	}
	if err := server.ClearFaults(db); err != nil {
		t.Fatal(err)
	}
	readUntil(t, a, cursor, r)
}

// A hub reads the bells at low priority: a throttled read only delays the
// wake-ups, which the re-checks then make.
func TestTheBellsAreReadAtLowPriority(t *testing.T) {
	log := &priorityLog{next: cosmostest.NewHTTPClient(), low: map[string]int{}, high: map[string]int{}}
	st := open(t, cosmos.Config{Transport: log})
	h := hub.New(st, hub.Options{SweepInterval: time.Hour}, nil)
	t.Cleanup(func() { h.Close(); _ = st.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		log.mu.Lock()
		low, high := log.low[cosmos.OpRead], log.high[cosmos.OpRead]
		log.mu.Unlock()
		if high != 0 {
			t.Fatalf("%d reads of the bells at normal priority", high)
		}
		if low >= 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, %d reads of the bells", low)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
