package cosmos_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A save's process dies right after its commit applied, before its
// finalize: the head never gets the session token of its page batches,
// which only that process had. Once the save's lease has ended, another
// instance, whose replicas are an hour behind, settles it: the save is
// committed, so its reservation is dropped and its notifications become
// visible. They must then be delivered: the pages must be read with a token
// that covers them, or a replica from before them answers the drawer short
// and every Peek of the recipient gives up until the replicas catch up.
func TestASaveCommittedByADeadProcessIsReadableOnceSettled(t *testing.T) {
	srv := laggingServer(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	db := cosmostest.UniqueID("db")
	openOn := func(transport policy.Transporter) *cosmos.Store {
		s, err := cosmos.Open(context.Background(), cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: transport,
			Throughput: "manual=100000", Now: clock, Lease: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	f := newFaulty()
	dying := openOn(f)
	cosmos.SetFinalizeFor(dying, 0)
	survivor := openOn(cosmostest.NewHTTPClient())
	committed := f.goneAfterCommit() // the process is gone from the moment its commit applied
	repo := hub.New(withoutBells{dying}, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	_, _ = repo.Save(context.Background(), ns) // its answer never reaches the producer
	if !committed.Load() {
		t.Fatal("the save never committed; the test tested nothing")
	}
	now.Add(int64(2 * time.Minute)) // the lease ends: the survivor's load settles the save
	other := hub.New(withoutBells{survivor}, hub.Options{}, nil)
	t.Cleanup(other.Close)
	drainExactly(t, other, r, ids(ns))
}
