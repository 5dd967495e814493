package cosmos_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/test/cosmostest"
)

// firedOn returns how often the rules of srv fired.
func firedOn(t *testing.T, srv *cosmostest.Server) int {
	t.Helper()
	rules, err := srv.Faults()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rules {
		n += r.Fired
	}
	return n
}

// Instance A stores ids; instance B, whose replicas are an hour behind,
// saves the same ids again, and the answer to B's id document's create is
// lost: the resend answers 409 (the document is B's own). B's look-up
// after it must still see A's document, written before B's: it reads
// with the token of B's own write, which the 409 does not give B's
// store. Without it the look-up reads a replica from before A's save, B
// commits the id a second time and it is delivered twice.
func TestAnIDDocumentsResendKeepsItsTokenForTheLookUp(t *testing.T) {
	srv := laggingServer(t)
	_, repos := twoInstances(t, srv)
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	// One id: one id document, so B writes nothing else to the ids
	// container whose token would cover A's.
	ns := notifications(1, r, 1)
	if res, err := a.Save(ctx, ns); err != nil || res.Saved != len(ns) {
		t.Fatalf("save through A = %+v, %v", res, err)
	}
	if err := srv.AddFaults(cosmostest.Fault{Kind: cosmostest.LostUnavailable, Count: 1, Ops: []string{"create"}, Coll: "ids"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.ClearFaults("") })
	res, err := b.Save(ctx, ns)
	if firedOn(t, srv) != 1 {
		t.Fatal("no id document's answer was lost; the test tested nothing")
	}
	if err == nil && res.Duplicates != len(ns) {
		t.Fatalf("the same ids saved again through B = %+v; want %d duplicates", res, len(ns))
	}
	if err := srv.ClearFaults(""); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		if res, err = b.Save(ctx, ns); err != nil || res.Duplicates != len(ns) {
			t.Fatalf("the resend through B = %+v, %v; want %d duplicates", res, err, len(ns))
		}
	}
	drainExactly(t, b, r, ids(ns))
}
