package cosmostest_test

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/test/cosmostest"
)

// tokens merges session tokens per partition key range, keeping the highest LSN of each, as a
// client that reads its own writes must.
type tokens map[string]int64

func (m tokens) note(t *testing.T, tok *string) string {
	t.Helper()
	if tok == nil || *tok == "" {
		t.Fatal("no session token")
	}
	var rng string
	for seg := range strings.SplitSeq(*tok, ",") {
		id, rest, ok := strings.Cut(seg, ":")
		_, lsn, ok2 := strings.Cut(rest, "#")
		n, err := strconv.ParseInt(lsn, 10, 64)
		if !ok || !ok2 || err != nil {
			t.Fatalf("session token %q is not <range>:<version>#<lsn>", *tok)
		}
		m[id] = max(m[id], n)
		rng = id
	}
	return rng
}

func (m tokens) String() string {
	segs := make([]string, 0, len(m))
	for id, n := range m {
		segs = append(segs, id+":-1#"+strconv.FormatInt(n, 10))
	}
	slices.Sort(segs)
	return strings.Join(segs, ",")
}

// TestSplitIsSurvivedByTheSDK splits a partition key range while a client runs: reads and
// writes keep working, a session token taken before the split still makes later reads see the
// writes it covers (replicas lag an hour here, so without the token they would see nothing),
// and ReadManyItems, which addresses ranges by id, gets 410/1002 for the parent, refreshes its
// routing map from the pkranges feed and succeeds.
func TestSplitIsSurvivedByTheSDK(t *testing.T) {
	s, c, dbID, ct := countedContainer(t, cosmostest.Options{Charges: true, Lag: time.Hour, LagFixed: true, Ranges: 2}, azcosmos.ContainerProperties{})
	ctx := ctxT(t)
	tok := tokens{}
	var ids []azcosmos.ItemIdentity
	for i := range 40 {
		pk := "k" + strconv.Itoa(i)
		r, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(t, doc{ID: "x", PK: pk, Pos: i}), nil)
		if err != nil {
			t.Fatal(err)
		}
		tok.note(t, r.SessionToken)
		ids = append(ids, azcosmos.ItemIdentity{ID: "x", PartitionKey: azcosmos.NewPartitionKeyString(pk)})
	}
	if len(tok) != 2 {
		t.Fatalf("40 partition keys landed in ranges %v, want both ranges", tok)
	}
	before := tok.String()
	readMany := func(token string) int {
		t.Helper()
		res, err := c.ReadManyItems(ctx, ids, &azcosmos.ReadManyItemsOptions{SessionToken: &token})
		if err != nil {
			t.Fatalf("ReadManyItems: %v", err)
		}
		return len(res.Items)
	}
	if n := readMany(before); n != 40 {
		t.Fatalf("ReadManyItems before the split: %d items, want 40", n)
	}
	if n := readMany(""); n != 0 {
		t.Fatalf("ReadManyItems without a token: %d items, want 0 (the replicas lag an hour)", n)
	}

	kids, err := s.Split(dbID, "items", "")
	if err != nil {
		t.Fatal(err)
	}
	live, err := s.Ranges(dbID, "items")
	if err != nil {
		t.Fatal(err)
	}
	if len(kids) != 2 || len(live) != 3 {
		t.Fatalf("split: children %v, live ranges %+v; want 2 children and 3 live ranges", kids, live)
	}
	for _, r := range live {
		if slices.Contains(kids, r.ID) && len(r.Parents) != 1 {
			t.Errorf("child range %+v does not name its parent", r)
		}
	}

	// Point reads with the token from before the split see every write it covers.
	for i, id := range ids {
		if _, err := c.ReadItem(ctx, id.PartitionKey, id.ID, &azcosmos.ItemOptions{SessionToken: &before}); err != nil {
			t.Fatalf("read k%d after the split with the token from before it: %v", i, err)
		}
	}
	ct.Reset()
	if n := readMany(before); n != 40 {
		t.Fatalf("ReadManyItems after the split: %d items, want 40", n)
	}
	var gone, refreshed int
	for _, call := range ct.Calls() {
		if call.Status == http.StatusGone {
			gone++
		}
		if call.Op == "ReadPartitionKeyRanges" && call.Status == http.StatusOK {
			refreshed++
		}
	}
	if gone == 0 || refreshed == 0 {
		t.Errorf("ReadManyItems after the split: %d answers 410, %d routing map reads; want the SDK to meet the split and refresh:\n%s",
			gone, refreshed, ct.Summary())
	}

	// Writes keep working and land in the children, whose tokens continue the parent's LSN.
	for i, id := range ids {
		r, err := c.UpsertItem(ctx, id.PartitionKey, mustJSON(t, doc{ID: "x", PK: "k" + strconv.Itoa(i), Pos: 100 + i}), nil)
		if err != nil {
			t.Fatalf("write after the split: %v", err)
		}
		tok.note(t, r.SessionToken)
	}
	if !slices.ContainsFunc(kids, func(id string) bool { _, ok := tok[id]; return ok }) {
		t.Fatalf("no write after the split was answered by a child range: tokens %v", tok)
	}
	after := tok.String()
	for i, id := range ids {
		r, err := c.ReadItem(ctx, id.PartitionKey, id.ID, &azcosmos.ItemOptions{SessionToken: &after})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(r.Value), `"pos":`+strconv.Itoa(100+i)) {
			t.Fatalf("k%d read with the merged token after the split: %s, want its latest write", i, r.Value)
		}
	}
}

// TestThrottlingIsPerPartitionKeyRange: a container's throughput is spread over its ranges and
// each throttles on its own, so one hot range answering 429 leaves another range's requests
// alone.
func TestThrottlingIsPerPartitionKeyRange(t *testing.T) {
	_, c, _ := faithfulContainer(t, cosmostest.Options{Charges: true, Ranges: 2, RUPerSecond: 100}, azcosmos.ContainerProperties{})
	ctx := ctxT(t)
	rangeOf := map[string]string{}
	var hot, cold string
	for i := 0; i < 40 && (hot == "" || cold == ""); i++ {
		pk := "p" + strconv.Itoa(i)
		r, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(t, doc{ID: "x", PK: pk}), nil)
		if err != nil {
			t.Fatal(err)
		}
		rangeOf[pk] = tokens{}.note(t, r.SessionToken)
		if hot == "" {
			hot = pk
		} else if rangeOf[pk] != rangeOf[hot] {
			cold = pk
		}
	}
	if cold == "" {
		t.Fatalf("every partition key landed in range %s", rangeOf[hot])
	}
	hotPK := azcosmos.NewPartitionKeyString(hot)
	var throttled *azcore.ResponseError
	for i := 0; i < 200 && throttled == nil; i++ {
		_, err := c.CreateItem(ctx, hotPK, mustJSON(t, doc{ID: "h" + strconv.Itoa(i), PK: hot}), nil)
		var re *azcore.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusTooManyRequests {
			throttled = re
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if throttled == nil {
		t.Fatal("200 creates in one range at 50 RU/s were never throttled")
	}
	if throttled.RawResponse.Header.Get("x-ms-retry-after-ms") == "" {
		t.Error("429 without x-ms-retry-after-ms")
	}
	if _, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString(cold), "x", nil); err != nil {
		t.Fatalf("a read in range %s while range %s is throttled: %v", rangeOf[cold], rangeOf[hot], err)
	}
}

// TestAPartitionKeyRangeServesAtMost10000RUPerSecond: a container's throughput is spread evenly
// over its ranges, and no range gets more than 10,000 RU/s (a container with more throughput
// than that per range would have more physical partitions on Cosmos DB).
func TestAPartitionKeyRangeServesAtMost10000RUPerSecond(t *testing.T) {
	s, _, dbID := faithfulContainer(t, cosmostest.Options{Charges: true, Ranges: 2}, azcosmos.ContainerProperties{})
	for _, tc := range []struct{ container, perRange float64 }{{1000, 500}, {20000, 10000}, {50000, 10000}} {
		if err := s.SetThroughput(dbID, "items", tc.container); err != nil {
			t.Fatal(err)
		}
		live, err := s.Ranges(dbID, "items")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range live {
			if r.RUPerSecond != tc.perRange {
				t.Errorf("container at %v RU/s: range %s serves %v RU/s, want %v", tc.container, r.ID, r.RUPerSecond, tc.perRange)
			}
		}
	}
}

// TestATokenOfOneRangeDoesNotHurryAnother: replicas of different partition key ranges lag on
// their own, and a session token says only how far the ranges it names must have caught up
// (https://learn.microsoft.com/azure/cosmos-db/consistency-levels#session-consistency). A
// cross-partition query that carries the token of a write in one range sees that write, but
// not a write in another range its token does not name (the replicas lag an hour here), and
// the token it answers does not claim that range caught up.
func TestATokenOfOneRangeDoesNotHurryAnother(t *testing.T) {
	_, c, _, _ := countedContainer(t, cosmostest.Options{Lag: time.Hour, LagFixed: true, Ranges: 2}, azcosmos.ContainerProperties{})
	ctx := ctxT(t)
	pkIn := map[string]string{} // range -> a partition key in it
	for i := 0; len(pkIn) < 2; i++ {
		pk := "k" + strconv.Itoa(i)
		r, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(t, doc{ID: "probe", PK: pk}), nil)
		if err != nil {
			t.Fatal(err)
		}
		tk := tokens{}
		if rng := tk.note(t, r.SessionToken); pkIn[rng] == "" {
			pkIn[rng] = pk
		}
	}
	// Another client writes in range 1, then this one in range 0.
	other := tokens{}
	w, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pkIn["1"]), mustJSON(t, doc{ID: "theirs", PK: pkIn["1"]}), nil)
	if err != nil {
		t.Fatal(err)
	}
	other.note(t, w.SessionToken)
	first := tokens{}
	w, err = c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pkIn["0"]), mustJSON(t, doc{ID: "mine", PK: pkIn["0"]}), nil)
	if err != nil {
		t.Fatal(err)
	}
	first.note(t, w.SessionToken)
	tok := first.String()
	page, err := c.NewQueryItemsPager("SELECT * FROM c WHERE c.id IN ('mine', 'theirs')", azcosmos.NewPartitionKey(),
		&azcosmos.QueryOptions{SessionToken: &tok}).NextPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(t, page.Items); !slices.Equal(got, []string{"mine"}) {
		t.Errorf("cross-partition query with the token of range 0 only: %v, want [mine] (range 1 lags and its write is not covered)", got)
	}
	answered := tokens{}
	got := page.RawResponse.Header.Get("x-ms-session-token")
	answered.note(t, &got)
	if answered["1"] >= other["1"] {
		t.Errorf("the query answered token %s, claiming range 1 at LSN %d, which the write it did not see made", answered, answered["1"])
	}
}
