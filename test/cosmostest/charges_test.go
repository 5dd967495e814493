package cosmostest_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/test/cosmostest"
)

// Microsoft's published request charges, from "Understand request units consumption in Azure
// Cosmos DB" (https://learn.microsoft.com/azure/cosmos-db/understand-request-unit-consumption):
// the per-size table (KB → RU of a point read and of a write) and the worked examples below.
var (
	publishedKB      = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048}
	publishedReadRU  = []float64{1.00, 1.04, 1.14, 1.33, 1.67, 2.19, 4.76, 9.95, 20.28, 40.95, 145.90, 291.80}
	publishedWriteRU = []float64{4.95, 6.29, 6.67, 7.04, 9.52, 11.23, 22.67, 48.19, 98.29, 184.57, 625.00, 1250.00}
)

// bySize reads a column of the published table at a size, linearly between its rows.
func bySize(col []float64, bytes int) float64 {
	kb := float64(bytes) / 1024
	if kb <= publishedKB[0] {
		return col[0]
	}
	for i := 1; i < len(publishedKB); i++ {
		if kb <= publishedKB[i] {
			f := (kb - publishedKB[i-1]) / (publishedKB[i] - publishedKB[i-1])
			return col[i-1] + f*(col[i]-col[i-1])
		}
	}
	n := len(publishedKB) - 1
	return col[n] * kb / publishedKB[n]
}

// within reports whether got is want ± tol.
func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// tenTermItem is an item of at most 1 KB as stored with exactly 10 indexed terms under the
// default indexing policy: id, pk and f0..f7 (system properties are not indexed).
func tenTermItem(id string, pad int) map[string]any {
	it := map[string]any{"id": id, "pk": "p"}
	for i := 0; i < 8; i++ {
		it["f"+strconv.Itoa(i)] = "v" + strconv.Itoa(i)
	}
	it["f7"] = strings.Repeat("x", pad)
	return it
}

// TestChargesMatchMicrosoftExamples checks the server's charges against the examples Microsoft
// publishes: a 1 KB point read is 1 RU; a create of a 1 KB item with 10 indexed terms is
// 5.0 + 0.2 × 10 = 7 RU; a replace changing two indexed terms is 5.0 + 5.0 + 0.2 × 2 + 0.2 × 2
// = 10.8 RU; a patch of two terms adds 0.4 × 2 = 11.6 RU; a delete of the 1 KB item with 10
// terms is 7.0 RU. (The table's 1 KB write is 4.95, the examples round it to 5.0, hence ±0.1.)
// A query page is 2.3 RU plus the point read of each document it loads (the stated assumption,
// README "Request charges"), and reads under Strong consistency cost double
// (https://learn.microsoft.com/azure/cosmos-db/optimize-cost-reads-writes).
func TestChargesMatchMicrosoftExamples(t *testing.T) {
	_, c, _ := faithfulContainer(t, cosmostest.Options{Charges: true}, azcosmos.ContainerProperties{})
	ctx := ctxT(t)
	pk := azcosmos.NewPartitionKeyString("p")
	content := &azcosmos.ItemOptions{EnableContentResponseOnWrite: true}

	created, err := c.CreateItem(ctx, pk, mustJSON(t, tenTermItem("a", 700)), content)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(created.Value); n > 1024 || n < 900 {
		t.Fatalf("the item is %d bytes as stored, want about 1 KB", n)
	}
	if got := float64(created.RequestCharge); !within(got, 7.0, 0.1) {
		t.Errorf("create of a 1 KB item with 10 indexed terms: %v RU, Microsoft's example 7 RU", got)
	}
	read, err := c.ReadItem(ctx, pk, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := float64(read.RequestCharge); got != 1 {
		t.Errorf("point read of a 1 KB item: %v RU, want 1", got)
	}
	changed := tenTermItem("a", 700)
	changed["f0"], changed["f1"] = "w0", "w1"
	replaced, err := c.ReplaceItem(ctx, pk, "a", mustJSON(t, changed), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := float64(replaced.RequestCharge); !within(got, 10.8, 0.15) {
		t.Errorf("replace changing 2 indexed terms: %v RU, Microsoft's example 10.8 RU", got)
	}
	ops := azcosmos.PatchOperations{}
	ops.AppendSet("/f2", "w2")
	ops.AppendSet("/f3", "w3")
	patched, err := c.PatchItem(ctx, pk, "a", ops, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := float64(patched.RequestCharge); !within(got, 11.6, 0.15) {
		t.Errorf("patch of 2 indexed terms: %v RU, Microsoft's example 11.6 RU", got)
	}

	// Query: one page, the base plus the one document loaded; an empty page, the base.
	page := func(sql string) float64 {
		p := c.NewQueryItemsPager(sql, pk, nil)
		r, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return float64(r.RequestCharge)
	}
	if got := page("SELECT * FROM c WHERE c.id = 'a'"); !within(got, 2.3+1, 0.011) {
		t.Errorf("query loading one 1 KB item: %v RU, want 2.3 + 1", got)
	}
	if got := page("SELECT * FROM c WHERE c.id = 'none'"); !within(got, 2.3, 0.011) {
		t.Errorf("empty query page: %v RU, want 2.3", got)
	}

	deleted, err := c.DeleteItem(ctx, pk, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := float64(deleted.RequestCharge); !within(got, 7.0, 0.1) {
		t.Errorf("delete of a 1 KB item with 10 indexed terms: %v RU, Microsoft's example 7.0 RU", got)
	}

	// Larger items follow the published table: a 128 KB item reads for 9.95 RU.
	big := map[string]any{"id": "big", "pk": "p", "blob": ""}
	big["blob"] = strings.Repeat("z", 128*1024-200)
	w, err := c.CreateItem(ctx, pk, mustJSON(t, big), content)
	if err != nil {
		t.Fatal(err)
	}
	big["blob"] = strings.Repeat("z", 128*1024-200+(128*1024-len(w.Value)))
	w, err = c.ReplaceItem(ctx, pk, "big", mustJSON(t, big), content)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Value) != 128*1024 {
		t.Fatalf("big item is %d bytes, want 128 KB", len(w.Value))
	}
	if got := float64(w.RequestCharge); !within(got, 2*48.19+0.2*2, 0.011) {
		t.Errorf("replace of a 128 KB item by another (its blob term changed): %v RU, want 2 × 48.19 + 0.4", got)
	}
	r, err := c.ReadItem(ctx, pk, "big", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := float64(r.RequestCharge); !within(got, 9.95, 0.011) {
		t.Errorf("point read of a 128 KB item: %v RU, Microsoft's table 9.95", got)
	}

	// A transactional batch costs the sum of its operations.
	b := c.NewTransactionalBatch(pk)
	b.CreateItem(mustJSON(t, tenTermItem("b1", 700)), nil)
	b.ReadItem("big", nil)
	br, err := c.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil || !br.Success {
		t.Fatalf("batch: %v", err)
	}
	if got := float64(br.RequestCharge); !within(got, 6.95+9.95, 0.011) {
		t.Errorf("batch of a create (6.95) and a read (9.95): %v RU", got)
	}
}

// TestStrongReadsCostDouble: under Strong (and Bounded Staleness) every read costs twice what it
// costs under Session.
func TestStrongReadsCostDouble(t *testing.T) {
	_, c, _ := faithfulContainer(t, cosmostest.Options{Charges: true, Consistency: "Strong"}, azcosmos.ContainerProperties{})
	ctx := ctxT(t)
	pk := azcosmos.NewPartitionKeyString("p")
	if _, err := c.CreateItem(ctx, pk, mustJSON(t, tenTermItem("a", 10)), nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.ReadItem(ctx, pk, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := float64(r.RequestCharge); got != 2 {
		t.Errorf("Strong point read of a small item: %v RU, want 2", got)
	}
}
