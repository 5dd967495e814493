package cosmos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// An instance lists every recipient it registered itself, however far its
// replicas lag: Recipients reads the registry partition with the session
// token of the registry writes. Session tokens are per partition key range,
// so the token of the registry create itself must be kept; a token of some
// other write covers the registry only when that write happens to fall in
// the same range.
func TestRecipientsSeesTheRegistrationsOfThisInstance(t *testing.T) {
	opts := cosmostest.Default()
	opts.Lag, opts.LagFixed, opts.Ranges = time.Hour, true, 2
	srv := cosmostest.StartWith(t, opts)
	s, err := cosmos.Open(context.Background(), cosmos.Config{
		Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: cosmostest.UniqueID("db"),
		Transport: cosmostest.NewHTTPClient(), Throughput: "manual=100000",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	repo := hub.New(s, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	want := map[string]bool{}
	for _, r := range recipientsOutsideTheRegistryRange(t, srv, 8) {
		want[r] = true
		if _, err := repo.Save(context.Background(), notifications(1, r, 1)); err != nil {
			t.Fatal(err)
		}
	}
	err = s.Recipients(context.Background(), func(r string) error {
		delete(want, r)
		return nil
	})
	if err != nil || len(want) != 0 {
		t.Fatalf("Recipients missed %d of the 8 recipients this instance registered (%v)", len(want), err)
	}
}

// recipientsOutsideTheRegistryRange returns n recipients whose partition key
// falls in another partition key range than the registry partition's, found
// from the session tokens of writes to a scratch container partitioned like
// the store's.
func recipientsOutsideTheRegistryRange(t *testing.T, srv *cosmostest.Server, n int) []string {
	t.Helper()
	ctx := context.Background()
	client := cosmostest.NewClient(t, srv)
	dbID := cosmostest.UniqueID("scratch")
	if _, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: dbID}, nil); err != nil {
		t.Fatal(err)
	}
	db, _ := client.NewDatabase(dbID)
	if _, err := db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: "c",
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}}, nil); err != nil {
		t.Fatal(err)
	}
	c, _ := db.NewContainer("c")
	rangeOf := func(pk string) string {
		r, err := c.UpsertItem(ctx, azcosmos.NewPartitionKeyString(pk), []byte(`{"id":"x","pk":"`+pk+`"}`), nil)
		if err != nil || r.SessionToken == nil {
			t.Fatalf("scratch write: %v", err)
		}
		id, _, _ := strings.Cut(*r.SessionToken, ":")
		return id
	}
	registry := rangeOf("_recipients")
	var out []string
	for len(out) < n {
		if r := uuid.NewString(); rangeOf(r) != registry {
			out = append(out, r)
		}
	}
	return out
}
