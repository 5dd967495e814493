package cosmostest_test

import (
	"slices"
	"strconv"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/test/cosmostest"
)

// TestFaultRulesPickTheirContainerAndRecur: a rule with a container picks
// only that container's requests (another container's creates neither pass
// its skip nor use up its count), and a rule with Every fires on the first
// request past its skip and then on every Every-th one, until its count.
func TestFaultRulesPickTheirContainerAndRecur(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if _, err := e.db.CreateContainer(ctx, azcosmos.ContainerProperties{
		ID:                     "other",
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}},
	}, nil); err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	other, err := e.db.NewContainer("other")
	if err != nil {
		t.Fatal(err)
	}
	dbID := e.db.ID()
	t.Cleanup(func() { _ = srv.ClearFaults(dbID) })
	if err := srv.AddFaults(cosmostest.Fault{
		Kind: cosmostest.Refuse503, Ops: []string{"create"}, DB: dbID, Coll: "items",
		Skip: 1, Every: 3, Count: 2,
	}); err != nil {
		t.Fatal(err)
	}
	create := func(c *azcosmos.ContainerClient, i int) int {
		t.Helper()
		pk := "k" + strconv.Itoa(i)
		_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(t, doc{ID: "x", PK: pk}), nil)
		if err != nil {
			return statusOf(err)
		}
		return 201
	}
	for i := range 5 {
		if got := create(other, i); got != 201 {
			t.Fatalf("create %d in the other container = %d, want 201 (the rule is for items)", i, got)
		}
	}
	var got []int
	for i := range 9 {
		got = append(got, create(e.c, i))
	}
	// Skip 1, then the first, fourth and (had the count allowed) seventh.
	want := []int{201, 503, 201, 201, 503, 201, 201, 201, 201}
	if !slices.Equal(got, want) {
		t.Errorf("creates in items answered %v, want %v", got, want)
	}
	states, err := srv.Faults()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(states, func(s cosmostest.FaultState) bool { return s.DB == dbID })
	if i < 0 {
		t.Fatal("the rule is gone from the server's list")
	}
	if s := states[i]; s.Fired != 2 || s.Seen != 5 {
		t.Errorf("rule fired %d times and saw %d requests, want 2 and 5 (it stops looking once used up)", s.Fired, s.Seen)
	}
}
