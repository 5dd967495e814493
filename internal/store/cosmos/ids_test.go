package cosmos_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// Time-ordered ids (UUIDv7) share their first bytes; bucketed by a hash of
// the whole id they still spread over every id partition.
func TestTimeOrderedIDsSpreadOverEveryIDBucket(t *testing.T) {
	db := cosmostest.UniqueID("db")
	st := open(t, cosmos.Config{Database: db, IDBuckets: 8})
	repo := hub.New(st, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ns := notifications(400, uuid.NewString(), 1)
	for i := range ns {
		ns[i].ID = uuid.Must(uuid.NewV7()).String()
	}
	if _, err := repo.Save(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	waitOutLag() // the query below carries no session token
	ids := containerOf(t, db, "ids")
	buckets := map[string]int{}
	pager := ids.NewQueryItemsPager("SELECT c.pk, c.i FROM c", azcosmos.NewPartitionKey(), nil)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range page.Items {
			var d struct {
				PK string
				I  []string
			}
			if err := json.Unmarshal(raw, &d); err != nil {
				t.Fatal(err)
			}
			buckets[d.PK] += len(d.I)
		}
	}
	if len(buckets) != 8 {
		t.Fatalf("400 time-ordered ids in %d of 8 buckets: %v", len(buckets), buckets)
	}
	for b, n := range buckets {
		if n < 20 {
			t.Fatalf("bucket %s holds %d of 400 ids: %v", b, n, buckets)
		}
	}
}

// A bundle of one notification reads that notification, not the page of a
// thousand it was saved in: the drawer query slices the page.
func TestABundleOfOneReadsOneItemNotAPage(t *testing.T) {
	e := newCostEnv(t, hub.Options{MaxBundleWeight: 1})
	ctx := context.Background()
	seeded(t, e)
	r := uuid.NewString()
	if _, err := e.repo.Save(ctx, notifications(1_000, r, 1)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		var b *domain.Bundle
		byOp, _ := e.measure(t, func() {
			var err error
			if b, err = e.repo.Peek(ctx, r, domain.GroupAll, ""); err != nil {
				t.Fatal(err)
			}
		})
		if b == nil || len(b.NotificationIDs) != 1 {
			t.Fatalf("bundle %+v", b)
		}
		// The recipient's state and the one item: a page of 1,000 packed
		// items is 25 KB.
		if q := byOp[cosmos.OpQuery]; q.ResponseBytes > 4_000 {
			t.Fatalf("peek of a bundle of one read %d bytes: %v", q.ResponseBytes, byOp)
		}
		if err := e.repo.Dequeue(ctx, r, b.ID); err != nil {
			t.Fatal(err)
		}
	}
}

func containerOf(t *testing.T, db, name string) *azcosmos.ContainerClient {
	t.Helper()
	c, err := cosmostest.NewClient(t, server).NewContainer(db, name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A lookup of more ids than one query can carry (512 KB of text and
// parameters) is split: 40,000 ids in one bucket are 1 MB packed.
func TestLookupOfManyIDsStaysUnderTheQueryLimit(t *testing.T) {
	opts := cosmostest.Default()
	opts.Limits = true
	srv := cosmostest.StartWith(t, opts)
	s, err := cosmos.Open(context.Background(), cosmos.Config{
		Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: cosmostest.UniqueID("db"),
		Transport: cosmostest.NewHTTPClient(), IDBuckets: 1, Throughput: "serverless",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ids := make([]string, 40_000)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	found, err := s.LookupIDs(context.Background(), ids)
	if err != nil || len(found) != 0 {
		t.Fatalf("lookup of 40,000 new ids: %d found, %v", len(found), err)
	}
}
