package cosmostest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/test/cosmostest"
)

// faithfulContainer is a fresh container (/pk) on its own server started with opts.
func faithfulContainer(t *testing.T, opts cosmostest.Options, props azcosmos.ContainerProperties) (*cosmostest.Server, *azcosmos.ContainerClient, string) {
	t.Helper()
	s, c, dbID, _ := countedContainer(t, opts, props)
	return s, c, dbID
}

// countedContainer is faithfulContainer with the transport that records its client's requests.
func countedContainer(t *testing.T, opts cosmostest.Options, props azcosmos.ContainerProperties) (*cosmostest.Server, *azcosmos.ContainerClient, string, *cosmostest.CountingTransport) {
	t.Helper()
	s := cosmostest.StartWith(t, opts)
	ctx := ctxT(t)
	ct := cosmostest.NewCountingTransport(nil)
	co := cosmostest.ClientOptions(ct)
	co.Retry.MaxRetries = -1 // see every 429 and error as it is
	client := cosmostest.NewClientWithOptions(t, s, co)
	dbID := cosmostest.UniqueID("db")
	if _, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: dbID}, nil); err != nil {
		t.Fatalf("CreateDatabase: %v", err)
	}
	db, err := client.NewDatabase(dbID)
	if err != nil {
		t.Fatal(err)
	}
	props.ID = "items"
	props.PartitionKeyDefinition = azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}
	if _, err := db.CreateContainer(ctx, props, nil); err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	c, err := db.NewContainer("items")
	if err != nil {
		t.Fatal(err)
	}
	return s, c, dbID, ct
}

func TestFaithfulLimits(t *testing.T) {
	s, c, dbID := faithfulContainer(t, cosmostest.Options{Limits: true}, azcosmos.ContainerProperties{})
	ctx := ctxT(t)
	pk := azcosmos.NewPartitionKeyString("p")

	batch := func(n int) error {
		b := c.NewTransactionalBatch(pk)
		for i := 0; i < n; i++ {
			b.CreateItem(mustJSON(t, doc{ID: "b" + strconv.Itoa(n) + "-" + strconv.Itoa(i), PK: "p"}), nil)
		}
		resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
		if err == nil && !resp.Success {
			t.Fatalf("batch of %d failed: %+v", n, resp.OperationResults[0])
		}
		return err
	}
	if err := batch(101); statusOf(err) != http.StatusBadRequest {
		t.Errorf("batch of 101 operations: %v, want 400", err)
	}
	if err := batch(100); err != nil {
		t.Errorf("batch of 100 operations: %v", err)
	}

	// azcosmos cannot send a batch over two partition keys (each operation takes the batch's);
	// another client can, and Cosmos refuses it.
	span := `[{"operationType":"Create","partitionKey":"[\"p\"]","resourceBody":{"id":"s1","pk":"p"}},` +
		`{"operationType":"Create","partitionKey":"[\"q\"]","resourceBody":{"id":"s2","pk":"q"}}]`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.Endpoint+"dbs/"+dbID+"/colls/items/docs", strings.NewReader(span))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-ms-cosmos-is-batch-request", "true")
	req.Header.Set("x-ms-cosmos-batch-atomic", "true")
	req.Header.Set("x-ms-documentdb-partitionkey", `["p"]`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("batch over two partition keys: %s, want 400", resp.Status)
	}

	big := doc{ID: "big", PK: "p", Type: strings.Repeat("x", 2100*1024)}
	if _, err := c.CreateItem(ctx, pk, mustJSON(t, big), nil); statusOf(err) != http.StatusRequestEntityTooLarge {
		t.Errorf("2.1 MB item: %v, want 413", err)
	}
	if _, err := c.ReadItem(ctx, pk, "big", nil); statusOf(err) != http.StatusNotFound {
		t.Errorf("the refused item was stored: %v", err)
	}
	almost := doc{ID: "almost", PK: "p", Type: strings.Repeat("x", 1900*1024)}
	if _, err := c.CreateItem(ctx, pk, mustJSON(t, almost), nil); err != nil {
		t.Errorf("1.9 MB item: %v", err)
	}

	q := azcosmos.QueryOptions{QueryParameters: []azcosmos.QueryParameter{{Name: "@t", Value: strings.Repeat("y", 600*1024)}}}
	pager := c.NewQueryItemsPager("SELECT * FROM c WHERE c.type = @t", pk, &q)
	if _, err := pager.NextPage(ctx); statusOf(err) != http.StatusBadRequest {
		t.Errorf("600 KB query: %v, want 400", err)
	}
	q.QueryParameters[0].Value = strings.Repeat("y", 400*1024)
	pager = c.NewQueryItemsPager("SELECT * FROM c WHERE c.type = @t", pk, &q)
	if _, err := pager.NextPage(ctx); err != nil {
		t.Errorf("400 KB query: %v", err)
	}
}

// termsOf counts a document's indexed terms as the model does for the container below:
// every scalar leaf except system properties and those under /payload/.
func termsOf(v any, top bool, under string) int {
	switch x := v.(type) {
	case map[string]any:
		n := 0
		for k, e := range x {
			if top && (strings.HasPrefix(k, "_") || k == "payload") {
				continue
			}
			n += termsOf(e, false, under+"/"+k)
		}
		return n
	case []any:
		n := 0
		for _, e := range x {
			n += termsOf(e, false, under)
		}
		return n
	default:
		return 1
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 0.011 }

func TestFaithfulCharges(t *testing.T) {
	_, c, _ := faithfulContainer(t, cosmostest.Options{Charges: true}, azcosmos.ContainerProperties{
		IndexingPolicy: &azcosmos.IndexingPolicy{
			Automatic: true, IndexingMode: azcosmos.IndexingModeConsistent,
			IncludedPaths: []azcosmos.IncludedPath{{Path: "/*"}},
			ExcludedPaths: []azcosmos.ExcludedPath{{Path: "/payload/*"}},
		},
	})
	ctx := ctxT(t)
	pk := azcosmos.NewPartitionKeyString("p")
	content := &azcosmos.ItemOptions{EnableContentResponseOnWrite: true}
	var stored []byte
	for i := 0; i < 10; i++ {
		item := map[string]any{"id": "i" + strconv.Itoa(i), "pk": "p", "n": i, "tags": []string{"a", "b"},
			"payload": map[string]any{"a": i, "blob": strings.Repeat("z", 1500)}}
		resp, err := c.CreateItem(ctx, pk, mustJSON(t, item), content)
		if err != nil {
			t.Fatal(err)
		}
		var back map[string]any
		if err := json.Unmarshal(resp.Value, &back); err != nil {
			t.Fatal(err)
		}
		want := bySize(publishedWriteRU, len(resp.Value)) + 0.2*float64(termsOf(back, true, ""))
		if !near(float64(resp.RequestCharge), want) {
			t.Errorf("create %d: %v RU, want %v (%d bytes)", i, resp.RequestCharge, want, len(resp.Value))
		}
		stored = resp.Value
	}
	r, err := c.ReadItem(ctx, pk, "i9", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := bySize(publishedReadRU, len(r.Value)); !near(float64(r.RequestCharge), want) {
		t.Errorf("read: %v RU, want %v", r.RequestCharge, want)
	}
	if _, err := c.ReadItem(ctx, pk, "missing", nil); statusOf(err) != 404 {
		t.Fatal(err)
	}

	query := func(sql string) (float64, int, int) {
		p := c.NewQueryItemsPager(sql, pk, nil)
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		bytes := 2
		for i, it := range page.Items {
			bytes += len(it)
			if i > 0 {
				bytes++
			}
		}
		return float64(page.RequestCharge), len(page.Items), bytes
	}
	// Indexed filter: only the one match is loaded. Unindexed filter: all 10 are. Each loaded
	// document costs its point read on top of the page's 2.3 RU.
	got, n, size := query("SELECT * FROM c WHERE c.n = 3")
	if want := 2.3 + bySize(publishedReadRU, size-2); n != 1 || !near(got, want) {
		t.Errorf("indexed query: %v RU for %d items, want %v", got, n, want)
	}
	got, n, size = query("SELECT * FROM c WHERE c.payload.a = 3")
	if want := 2.3 + 10*bySize(publishedReadRU, size-2); n != 1 || !near(got, want) {
		t.Errorf("unindexed query: %v RU for %d items, want %v", got, n, want)
	}

	d, err := c.DeleteItem(ctx, pk, "i9", nil)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	_ = json.Unmarshal(stored, &back)
	if want := bySize(publishedWriteRU, len(stored)) + 0.2*float64(termsOf(back, true, "")); !near(float64(d.RequestCharge), want) {
		t.Errorf("delete: %v RU, want %v", d.RequestCharge, want)
	}

	b := c.NewTransactionalBatch(pk)
	b.ReadItem("i1", nil)
	b.DeleteItem("i2", nil)
	b.CreateItem(mustJSON(t, doc{ID: "new", PK: "p"}), nil)
	br, err := c.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil || !br.Success {
		t.Fatalf("batch: %v", err)
	}
	var sum float64
	for _, op := range br.OperationResults {
		if op.RequestCharge <= 0 {
			t.Errorf("batch operation charged %v", op.RequestCharge)
		}
		sum += float64(op.RequestCharge)
	}
	if !near(float64(br.RequestCharge), sum) {
		t.Errorf("batch: %v RU, want the sum of its operations %v", br.RequestCharge, sum)
	}
}

func TestFaithfulThrottling(t *testing.T) {
	s, c, dbID := faithfulContainer(t, cosmostest.Options{Charges: true}, azcosmos.ContainerProperties{})
	if err := s.SetThroughput(dbID, "items", 20); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	pk := azcosmos.NewPartitionKeyString("p")
	// Each write of a small item costs a little over 5 RU: 20 RU/s admits four (the fourth
	// drives the balance into debt), then answers 429.
	var throttled *azcore.ResponseError
	admitted := 0
	for i := 0; i < 10 && throttled == nil; i++ {
		_, err := c.CreateItem(ctx, pk, mustJSON(t, doc{ID: "w" + strconv.Itoa(i), PK: "p"}), nil)
		switch {
		case err == nil:
			admitted++
		case errors.As(err, &throttled) && throttled.StatusCode == http.StatusTooManyRequests:
		default:
			t.Fatal(err)
		}
	}
	if throttled == nil || admitted != 4 {
		t.Fatalf("admitted %d writes, throttled %v; want 4 then a 429", admitted, throttled)
	}
	h := throttled.RawResponse.Header
	wait, err := strconv.Atoi(h.Get("x-ms-retry-after-ms"))
	if err != nil || wait <= 0 || wait > 1000 {
		t.Fatalf("x-ms-retry-after-ms %q", h.Get("x-ms-retry-after-ms"))
	}
	if h.Get("x-ms-substatus") != "3200" {
		t.Errorf("x-ms-substatus %q, want 3200", h.Get("x-ms-substatus"))
	}
	if _, err := c.ReadItem(ctx, pk, "w9", nil); statusOf(err) != http.StatusTooManyRequests {
		t.Errorf("a read before the wait: %v, want 429", err)
	}
	// The server's clock moves instead of the test sleeping: after the wait it admits again.
	if err := s.AdvanceClock(time.Duration(wait) * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateItem(ctx, pk, mustJSON(t, doc{ID: "after", PK: "p"}), nil); err != nil {
		t.Errorf("write after x-ms-retry-after-ms: %v", err)
	}
}

func TestFaithfulTTL(t *testing.T) {
	ttlOn := int32(-1)
	s, c, _ := faithfulContainer(t, cosmostest.Options{TTL: true}, azcosmos.ContainerProperties{DefaultTimeToLive: &ttlOn})
	ctx := ctxT(t)
	pk := azcosmos.NewPartitionKeyString("p")
	ten := 10
	for _, d := range []doc{{ID: "short", PK: "p", TTL: &ten}, {ID: "forever", PK: "p"}} {
		if _, err := c.CreateItem(ctx, pk, mustJSON(t, d), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ReadItem(ctx, pk, "short", nil); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	if err := s.AdvanceClock(11 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadItem(ctx, pk, "short", nil); statusOf(err) != http.StatusNotFound {
		t.Errorf("expired item: %v, want 404", err)
	}
	if _, err := c.ReadItem(ctx, pk, "forever", nil); err != nil {
		t.Errorf("item without ttl under defaultTtl -1: %v", err)
	}
	page, err := c.NewQueryItemsPager("SELECT * FROM c", pk, nil).NextPage(ctx)
	if err != nil || len(page.Items) != 1 {
		t.Errorf("query after expiry: %d items, %v; want only the one without ttl", len(page.Items), err)
	}
	// Removed, not only hidden: the id is free again.
	if _, err := c.CreateItem(ctx, pk, mustJSON(t, doc{ID: "short", PK: "p"}), nil); err != nil {
		t.Errorf("re-create the expired id: %v", err)
	}
}

// Cosmos DB refuses an item whose ttl is not -1 or 1..2^31-1 seconds with
// 400, on its own and in a transactional batch.
func TestFaithfulTTLRange(t *testing.T) {
	ttlOn := int32(-1)
	_, c, _ := faithfulContainer(t, cosmostest.Options{TTL: true}, azcosmos.ContainerProperties{DefaultTimeToLive: &ttlOn})
	ctx := ctxT(t)
	pk := azcosmos.NewPartitionKeyString("p")
	for i, ttl := range []int{-1, 1, math.MaxInt32} {
		if _, err := c.CreateItem(ctx, pk, mustJSON(t, doc{ID: "ok" + strconv.Itoa(i), PK: "p", TTL: &ttl}), nil); err != nil {
			t.Errorf("ttl %d: %v", ttl, err)
		}
	}
	for i, ttl := range []int{0, -2, math.MaxInt32 + 1} {
		if _, err := c.CreateItem(ctx, pk, mustJSON(t, doc{ID: "bad" + strconv.Itoa(i), PK: "p", TTL: &ttl}), nil); statusOf(err) != http.StatusBadRequest {
			t.Errorf("ttl %d: %v, want 400", ttl, err)
		}
		b := c.NewTransactionalBatch(pk)
		b.CreateItem(mustJSON(t, doc{ID: "batch" + strconv.Itoa(i), PK: "p", TTL: &ttl}), nil)
		resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
		if err == nil && resp.Success {
			t.Errorf("ttl %d in a batch: applied, want refused", ttl)
		}
	}
}

func TestFaithfulDefaultTTL(t *testing.T) {
	five := int32(5)
	s, c, _ := faithfulContainer(t, cosmostest.Options{TTL: true}, azcosmos.ContainerProperties{DefaultTimeToLive: &five})
	ctx := ctxT(t)
	pk := azcosmos.NewPartitionKeyString("p")
	never := -1
	for _, d := range []doc{{ID: "default", PK: "p"}, {ID: "never", PK: "p", TTL: &never}} {
		if _, err := c.CreateItem(ctx, pk, mustJSON(t, d), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AdvanceClock(6 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadItem(ctx, pk, "default", nil); statusOf(err) != http.StatusNotFound {
		t.Errorf("item past the container's defaultTtl: %v, want 404", err)
	}
	if _, err := c.ReadItem(ctx, pk, "never", nil); err != nil {
		t.Errorf("item with ttl -1: %v", err)
	}
}

func TestFaithfulLag(t *testing.T) {
	// An hour of lag and a fixed seed: the reads below are reproducible and do not depend on
	// how fast the test runs.
	_, c, _ := faithfulContainer(t, cosmostest.Options{Lag: time.Hour, Seed: 7}, azcosmos.ContainerProperties{})
	ctx := ctxT(t)
	pk := azcosmos.NewPartitionKeyString("p")
	if _, err := c.CreateItem(ctx, pk, mustJSON(t, doc{ID: "x", PK: "p", N: 1}), nil); err != nil {
		t.Fatal(err)
	}
	w, err := c.ReplaceItem(ctx, pk, "x", mustJSON(t, doc{ID: "x", PK: "p", N: 2}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.SessionToken == nil || !strings.HasPrefix(*w.SessionToken, "0:-1#") {
		t.Fatalf("write session token %v, want 0:-1#<lsn>", w.SessionToken)
	}
	read := func(opts *azcosmos.ItemOptions) int64 {
		r, err := c.ReadItem(ctx, pk, "x", opts)
		if statusOf(err) == http.StatusNotFound {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		var d doc
		if err := json.Unmarshal(r.Value, &d); err != nil {
			t.Fatal(err)
		}
		return d.N
	}
	stale := 0
	for i := 0; i < 50; i++ {
		if read(nil) != 2 {
			stale++
		}
	}
	if stale == 0 {
		t.Error("50 reads without a session token all saw the latest write; want some stale")
	}
	for i := 0; i < 50; i++ {
		if n := read(&azcosmos.ItemOptions{SessionToken: w.SessionToken}); n != 2 {
			t.Fatalf("read %d with the write's session token saw n=%d, want 2", i, n)
		}
	}
	qo := &azcosmos.QueryOptions{SessionToken: w.SessionToken}
	for i := 0; i < 20; i++ {
		page, err := c.NewQueryItemsPager("SELECT * FROM c WHERE c.id = 'x'", pk, qo).NextPage(ctx)
		if err != nil || len(page.Items) != 1 || !bytes.Contains(page.Items[0], []byte(`"n":2`)) {
			t.Fatalf("query with the write's session token: %v %q", err, page.Items)
		}
	}
	ids := []azcosmos.ItemIdentity{{ID: "x", PartitionKey: pk}}
	staleMany := 0
	for i := 0; i < 20; i++ {
		r, err := c.ReadManyItems(ctx, ids, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Items) != 1 || !bytes.Contains(r.Items[0], []byte(`"n":2`)) {
			staleMany++
		}
		r, err = c.ReadManyItems(ctx, ids, &azcosmos.ReadManyItemsOptions{SessionToken: w.SessionToken})
		if err != nil || len(r.Items) != 1 || !bytes.Contains(r.Items[0], []byte(`"n":2`)) {
			t.Fatalf("ReadManyItems with the write's session token: %v %q", err, r.Items)
		}
	}
	if staleMany == 0 {
		t.Error("20 ReadManyItems without a session token all saw the latest write; want some stale")
	}
	// Writes apply to the latest state whatever the reads see.
	if _, err := c.ReplaceItem(ctx, pk, "x", mustJSON(t, doc{ID: "x", PK: "p", N: 3}), &azcosmos.ItemOptions{IfMatchEtag: &w.ETag}); err != nil {
		t.Errorf("conditional write on the latest etag: %v", err)
	}
}

func TestFaithfulConsistency(t *testing.T) {
	for _, level := range []string{"", "Eventual"} {
		s := cosmostest.StartWith(t, cosmostest.Options{Consistency: level})
		resp, err := http.Get(s.Endpoint) //nolint:noctx // test server on 127.0.0.1
		if err != nil {
			t.Fatal(err)
		}
		var acc struct {
			Policy struct {
				Level string `json:"defaultConsistencyLevel"`
			} `json:"userConsistencyPolicy"`
		}
		err = json.NewDecoder(resp.Body).Decode(&acc)
		_ = resp.Body.Close()
		want := level
		if want == "" {
			want = "Session"
		}
		if err != nil || acc.Policy.Level != want {
			t.Errorf("consistency %q: account says %q (%v)", level, acc.Policy.Level, err)
		}
	}
}

func TestFaithfulThroughputFromTheContainersOffer(t *testing.T) {
	s := cosmostest.StartWith(t, cosmostest.Options{Charges: true})
	ctx := ctxT(t)
	co := cosmostest.ClientOptions(nil)
	co.Retry.MaxRetries = -1
	client := cosmostest.NewClientWithOptions(t, s, co)
	dbID := cosmostest.UniqueID("db")
	if _, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: dbID}, nil); err != nil {
		t.Fatal(err)
	}
	db, err := client.NewDatabase(dbID)
	if err != nil {
		t.Fatal(err)
	}
	// The server does not enforce the 400 RU/s minimum: 10 RU/s makes the test short.
	tp := azcosmos.NewManualThroughputProperties(10)
	for _, id := range []string{"manual", "unlimited"} {
		o := &azcosmos.CreateContainerOptions{}
		if id == "manual" {
			o.ThroughputProperties = &tp
		}
		if _, err := db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: id,
			PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}}, o); err != nil {
			t.Fatal(err)
		}
	}
	pk := azcosmos.NewPartitionKeyString("p")
	writes := func(container string) (admitted int, throttled bool) {
		c, err := db.NewContainer(container)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			_, err := c.CreateItem(ctx, pk, mustJSON(t, doc{ID: "w" + strconv.Itoa(i), PK: "p"}), nil)
			if statusOf(err) == http.StatusTooManyRequests {
				return admitted, true
			}
			if err != nil {
				t.Fatal(err)
			}
			admitted++
		}
		return admitted, false
	}
	if n, throttled := writes("manual"); n != 2 || !throttled {
		t.Errorf("10 RU/s container: %d writes admitted, throttled %v; want 2 then 429", n, throttled)
	}
	if n, throttled := writes("unlimited"); n != 5 || throttled {
		t.Errorf("container without throughput: %d writes admitted, throttled %v; want all 5", n, throttled)
	}
}

// TestFaithfulLagShowsABatchWhole: a transactional batch commits as one, so a lagging read sees
// all of its writes or none of them, never the first ones without the rest.
func TestFaithfulLagShowsABatchWhole(t *testing.T) {
	_, c, _ := faithfulContainer(t, cosmostest.Options{Lag: 100 * time.Millisecond, Seed: 3}, azcosmos.ContainerProperties{})
	ctx := ctxT(t)
	pk := azcosmos.NewPartitionKeyString("p")
	const writes = 100 // the most a batch holds
	reads := 0
	for round := range 5 {
		b := c.NewTransactionalBatch(pk)
		for i := range writes {
			b.CreateItem(mustJSON(t, doc{ID: "r" + strconv.Itoa(round) + "-" + strconv.Itoa(i), PK: "p", N: int64(round)}), nil)
		}
		if resp, err := c.ExecuteTransactionalBatch(ctx, b, nil); err != nil || !resp.Success {
			t.Fatalf("batch %d: %v", round, err)
		}
		// Reads within the lag window after the batch: each is served as of a random moment in
		// it, before, during or after the batch.
		for deadline := time.Now().Add(150 * time.Millisecond); time.Now().Before(deadline); reads++ {
			pager := c.NewQueryItemsPager("SELECT c.id FROM c WHERE c.n = "+strconv.Itoa(round), azcosmos.NewPartitionKey(),
				&azcosmos.QueryOptions{PageSizeHint: 1000})
			seen := 0
			for pager.More() {
				page, err := pager.NextPage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				seen += len(page.Items)
			}
			if seen != 0 && seen != writes {
				t.Fatalf("a read saw %d of batch %d's %d writes", seen, round, writes)
			}
		}
	}
	t.Logf("%d reads", reads)
}

// TestASessionTokenAheadOfItsRangeIsNotServed: a read whose session token names a write its
// partition key range never made (an LSN past the range's) is answered 404 with substatus 1002
// (ReadSessionNotAvailable), as Cosmos DB answers when no replica has caught up with the token
// (https://learn.microsoft.com/azure/cosmos-db/nosql/troubleshoot-not-found), never served as
// if the token were met. Segments of other ranges do not matter to a read of one range.
func TestASessionTokenAheadOfItsRangeIsNotServed(t *testing.T) {
	_, c, _ := faithfulContainer(t, cosmostest.Options{Ranges: 2}, azcosmos.ContainerProperties{})
	ctx := ctxT(t)
	pk := azcosmos.NewPartitionKeyString("p")
	w, err := c.CreateItem(ctx, pk, mustJSON(t, doc{ID: "x", PK: "p", N: 1}), nil)
	if err != nil {
		t.Fatal(err)
	}
	tok := tokens{}
	rng := tok.note(t, w.SessionToken)
	other := "0"
	if rng == "0" {
		other = "1"
	}
	met := tok.String()
	tok[rng] += 5
	ahead := tok.String()
	elsewhere := met + "," + other + ":-1#1000"

	wantUnavailable := func(what string, err error) {
		t.Helper()
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != http.StatusNotFound || re.RawResponse.Header.Get("x-ms-substatus") != "1002" {
			t.Errorf("%s with a token ahead of its range (%s): %v, want 404 with substatus 1002", what, ahead, err)
		}
	}
	_, err = c.ReadItem(ctx, pk, "x", &azcosmos.ItemOptions{SessionToken: &ahead})
	wantUnavailable("point read", err)
	_, err = c.NewQueryItemsPager("SELECT * FROM c", pk, &azcosmos.QueryOptions{SessionToken: &ahead}).NextPage(ctx)
	wantUnavailable("query", err)
	_, err = c.NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{SessionToken: &ahead}).NextPage(ctx)
	wantUnavailable("cross-partition query", err)

	for what, tk := range map[string]string{"the write's token": met, "a token ahead only on another range": elsewhere} {
		if _, err := c.ReadItem(ctx, pk, "x", &azcosmos.ItemOptions{SessionToken: &tk}); err != nil {
			t.Errorf("point read with %s (%s): %v", what, tk, err)
		}
		if _, err := c.NewQueryItemsPager("SELECT * FROM c", pk, &azcosmos.QueryOptions{SessionToken: &tk}).NextPage(ctx); err != nil {
			t.Errorf("query with %s (%s): %v", what, tk, err)
		}
	}
	// Writes go to the primary: a token does not hold them back.
	if _, err := c.UpsertItem(ctx, pk, mustJSON(t, doc{ID: "x", PK: "p", N: 2}), &azcosmos.ItemOptions{SessionToken: &ahead}); err != nil {
		t.Errorf("upsert with a token ahead: %v", err)
	}
}

// TestWritesAnswerNoBodyUnlessAsked: azcosmos sends `Prefer: return=minimal` on every write
// unless EnableContentResponseOnWrite is set, and Cosmos DB then answers no resource: an empty
// body for a point write, no resourceBody for a transactional batch's operations unless the
// batch holds a read (the SDK then asks for content) — the ETag and status still come back.
// A caller that reads the document a write answered must ask for it.
func TestWritesAnswerNoBodyUnlessAsked(t *testing.T) {
	_, c, _ := faithfulContainer(t, cosmostest.Options{}, azcosmos.ContainerProperties{})
	ctx := ctxT(t)
	pk := azcosmos.NewPartitionKeyString("p")
	var patch azcosmos.PatchOperations
	patch.AppendSet("/n", 7)
	minimal := map[string]func() (azcosmos.ItemResponse, error){
		"create": func() (azcosmos.ItemResponse, error) {
			return c.CreateItem(ctx, pk, mustJSON(t, doc{ID: "x", PK: "p", N: 1}), nil)
		},
		"upsert": func() (azcosmos.ItemResponse, error) {
			return c.UpsertItem(ctx, pk, mustJSON(t, doc{ID: "x", PK: "p", N: 2}), nil)
		},
		"replace": func() (azcosmos.ItemResponse, error) {
			return c.ReplaceItem(ctx, pk, "x", mustJSON(t, doc{ID: "x", PK: "p", N: 3}), nil)
		},
		"patch": func() (azcosmos.ItemResponse, error) { return c.PatchItem(ctx, pk, "x", patch, nil) },
	}
	for _, what := range []string{"create", "upsert", "replace", "patch"} {
		r, err := minimal[what]()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(r.Value) != 0 || r.ETag == "" {
			t.Errorf("%s without EnableContentResponseOnWrite: body %q, ETag %q; want no body and an ETag", what, r.Value, r.ETag)
		}
	}
	r, err := c.ReplaceItem(ctx, pk, "x", mustJSON(t, doc{ID: "x", PK: "p", N: 4}), &azcosmos.ItemOptions{EnableContentResponseOnWrite: true})
	if err != nil || decode(t, r.Value).N != 4 {
		t.Errorf("replace with EnableContentResponseOnWrite: %v %q, want the document", err, r.Value)
	}

	b := c.NewTransactionalBatch(pk)
	b.CreateItem(mustJSON(t, doc{ID: "y", PK: "p"}), nil)
	b.ReplaceItem("x", mustJSON(t, doc{ID: "x", PK: "p", N: 5}), nil)
	resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil || !resp.Success || len(resp.OperationResults) != 2 {
		t.Fatalf("write batch: %v %+v", err, resp.OperationResults)
	}
	for i, op := range resp.OperationResults {
		if op.ResourceBody != nil || op.ETag == "" || op.StatusCode >= 300 {
			t.Errorf("write batch operation %d: status %d, body %q, ETag %q; want no body and an ETag", i, op.StatusCode, op.ResourceBody, op.ETag)
		}
	}
	b = c.NewTransactionalBatch(pk)
	b.ReplaceItem("x", mustJSON(t, doc{ID: "x", PK: "p", N: 6}), nil)
	b.ReadItem("y", nil)
	resp, err = c.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil || !resp.Success || len(resp.OperationResults) != 2 {
		t.Fatalf("batch with a read: %v %+v", err, resp.OperationResults)
	}
	for i, op := range resp.OperationResults {
		if op.ResourceBody == nil {
			t.Errorf("batch with a read, operation %d: no body; want every operation's document", i)
		}
	}
}

// TestAQueryPageHoldsAtMost4MB: Cosmos DB answers at most 4 MB per query page
// (https://learn.microsoft.com/azure/cosmos-db/concepts-limits#per-request-limits) and goes on
// with a continuation, whatever PageSizeHint asks: five items of 1.5 MB come two by two.
func TestAQueryPageHoldsAtMost4MB(t *testing.T) {
	_, c, _ := faithfulContainer(t, cosmostest.Options{}, azcosmos.ContainerProperties{})
	ctx := ctxT(t)
	pad := strings.Repeat("x", 1536<<10)
	for i := range 5 {
		item := map[string]any{"id": "big" + strconv.Itoa(i), "pk": "p", "pad": pad}
		if _, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString("p"), mustJSON(t, item), nil); err != nil {
			t.Fatal(err)
		}
	}
	for what, pk := range map[string]azcosmos.PartitionKey{"one partition": azcosmos.NewPartitionKeyString("p"), "cross-partition": azcosmos.NewPartitionKey()} {
		for _, hint := range []int32{0, 10} {
			pager := c.NewQueryItemsPager("SELECT * FROM c", pk, &azcosmos.QueryOptions{PageSizeHint: hint})
			seen := map[string]bool{}
			pages := 0
			for pager.More() {
				page, err := pager.NextPage(ctx)
				if err != nil {
					t.Fatalf("%s, hint %d: %v", what, hint, err)
				}
				pages++
				size := 0
				for _, raw := range page.Items {
					size += len(raw)
					seen[decode(t, raw).ID] = true
				}
				if size > 4<<20 {
					t.Errorf("%s, hint %d: page %d holds %d bytes, over 4 MB", what, hint, pages, size)
				}
			}
			if len(seen) != 5 || pages != 3 {
				t.Errorf("%s, hint %d: %d items in %d pages, want 5 in 3", what, hint, len(seen), pages)
			}
		}
	}
}

// TestAPatchOfMoreThanTenOperationsIsRefused: "there's a limit of 10 patch operations that can be
// added in a single patch specification"
// (https://learn.microsoft.com/azure/cosmos-db/partial-document-update-faq): a patch of 11 is
// refused 400 and changes nothing, alone or in a transactional batch; one of 10 applies. (The
// package refuses it itself; this keeps it so.)
func TestAPatchOfMoreThanTenOperationsIsRefused(t *testing.T) {
	_, c, _ := faithfulContainer(t, cosmostest.Options{Limits: true}, azcosmos.ContainerProperties{})
	ctx := ctxT(t)
	pk := azcosmos.NewPartitionKeyString("p")
	if _, err := c.CreateItem(ctx, pk, mustJSON(t, doc{ID: "x", PK: "p"}), nil); err != nil {
		t.Fatal(err)
	}
	ops := func(n int) azcosmos.PatchOperations {
		var p azcosmos.PatchOperations
		for i := range n {
			p.AppendSet("/f"+strconv.Itoa(i), i)
		}
		return p
	}
	if _, err := c.PatchItem(ctx, pk, "x", ops(11), nil); statusOf(err) != http.StatusBadRequest {
		t.Logf("XX %v", err)
		t.Errorf("patch of 11 operations: %v, want 400", err)
	}
	b := c.NewTransactionalBatch(pk)
	b.PatchItem("x", ops(11), nil)
	resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
	if statusOf(err) != http.StatusBadRequest && (err != nil || resp.Success || resp.OperationResults[0].StatusCode != http.StatusBadRequest) {
		t.Errorf("batch patch of 11 operations: %v %+v, want 400", err, resp.OperationResults)
	}
	r, err := c.ReadItem(ctx, pk, "x", nil)
	if err != nil || bytes.Contains(r.Value, []byte(`"f0"`)) {
		t.Fatalf("after the refused patches: %v %s, want the item unchanged", err, r.Value)
	}
	if _, err := c.PatchItem(ctx, pk, "x", ops(10), nil); err != nil {
		t.Errorf("patch of 10 operations: %v", err)
	}
}
