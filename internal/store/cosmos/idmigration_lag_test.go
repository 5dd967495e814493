package cosmos_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// migrationOnLaggingReplicas is an id index migration from 4 buckets to 8
// on a server whose replicas answer an hour behind any read whose session
// token does not cover what it asks for. The old instance saved one
// notification (ns) before the migration began; the other instance (next)
// began it and wrote nothing in the partition key range that holds that
// notification's old bucket, and the clock is past the both-layouts phase:
// next writes the new layout only, and reads both.
type migrationOnLaggingReplicas struct {
	srv        *cosmostest.Server
	db         string
	clock      *costClock
	old, next  *cosmos.Store
	oldHub     *hub.Hub
	nextHub    *hub.Hub
	recipient  string
	ns         []domain.Notification
	rangeOfOld string
	ids        *azcosmos.ContainerClient
}

func newMigrationOnLaggingReplicas(t *testing.T) *migrationOnLaggingReplicas {
	t.Helper()
	opts := cosmostest.Default()
	opts.Lag, opts.LagFixed = time.Hour, true
	m := &migrationOnLaggingReplicas{srv: cosmostest.StartWith(t, opts), db: cosmostest.UniqueID("db"), clock: &costClock{now: time.Now()}}
	m.old = openOnServer(t, m.srv, m.db, m.clock, cosmos.Config{IDBuckets: 4})
	m.oldHub = hub.New(m.old, hub.Options{}, nil)
	t.Cleanup(m.oldHub.Close)
	ids, err := cosmostest.NewClient(t, m.srv).NewContainer(m.db, "ids")
	if err != nil {
		t.Fatal(err)
	}
	m.ids = ids
	m.recipient = uuid.NewString()
	// An id whose old bucket is in another range than its new one: next's
	// writes of the new layout carry no token of the old bucket's range.
	m.ns = notifications(1, m.recipient, 1)
	for m.rangeOf(t, cosmos.Bucket(4, m.ns[0].ID)) == m.rangeOf(t, cosmos.Bucket(8, m.ns[0].ID)) {
		m.ns[0].ID = uuid.NewString()
	}
	m.rangeOfOld = m.rangeOf(t, cosmos.Bucket(4, m.ns[0].ID))
	saveExpecting(t, m.oldHub, m.ns, 1, 0)
	m.next = openOnServer(t, m.srv, m.db, m.clock, cosmos.Config{IDBuckets: 8, MigrateIDBuckets: true})
	m.nextHub = hub.New(m.next, hub.Options{}, nil)
	t.Cleanup(m.nextHub.Close)
	m.clock.advance(16 * time.Minute)
	return m
}

// openOnServer opens a store on database db of srv with cfg, on clock.
func openOnServer(t *testing.T, srv *cosmostest.Server, db string, clock *costClock, cfg cosmos.Config) *cosmos.Store {
	t.Helper()
	cfg.Endpoint, cfg.Key, cfg.Provision, cfg.Database, cfg.Transport = srv.Endpoint, srv.Key, true, db, cosmostest.NewHTTPClient()
	cfg.Now = clock.Now
	s, err := cosmos.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// idBuckets is the id index's bucket count a settings document records,
// and the count it migrates to (0: none).
type idBuckets struct {
	IDBuckets     int `json:"idBuckets"`
	NextIDBuckets int `json:"nextIdBuckets"`
}

// idBucketsOn reads the settings of database db of srv on the primary.
func idBucketsOn(t *testing.T, srv *cosmostest.Server, db string) idBuckets {
	t.Helper()
	c, err := cosmostest.NewClient(t, srv).NewContainer(db, "recipients")
	if err != nil {
		t.Fatal(err)
	}
	b := c.NewTransactionalBatch(azcosmos.NewPartitionKeyString("_settings")) // on the primary
	b.ReadItem("settings", nil)
	resp, err := c.ExecuteTransactionalBatch(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got idBuckets
	if err := json.Unmarshal(resp.OperationResults[0].ResourceBody, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

// rangeOf is the partition key range that holds bucket of the ids
// container: the one the session token of a read there names.
func (m *migrationOnLaggingReplicas) rangeOf(t *testing.T, bucket string) string {
	t.Helper()
	b := m.ids.NewTransactionalBatch(azcosmos.NewPartitionKeyString(bucket))
	b.ReadItem("none", nil)
	resp, err := m.ids.ExecuteTransactionalBatch(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	rng, _, ok := strings.Cut(resp.SessionToken, ":")
	if !ok || strings.Contains(resp.SessionToken, ",") {
		t.Fatalf("the token of a read of bucket %s names no one range: %q", bucket, resp.SessionToken)
	}
	return rng
}

// freshElsewhere is a notification for the recipient whose old and new
// buckets are both outside the range of ns's old bucket.
func (m *migrationOnLaggingReplicas) freshElsewhere(t *testing.T) []domain.Notification {
	t.Helper()
	ns := notifications(1, m.recipient, 1)
	for m.rangeOf(t, cosmos.Bucket(4, ns[0].ID)) == m.rangeOfOld || m.rangeOf(t, cosmos.Bucket(8, ns[0].ID)) == m.rangeOfOld {
		ns[0].ID = uuid.NewString()
	}
	return ns
}

// The look at whether the old layout is empty must see the ids other
// instances wrote there, not only this instance's: ids saved before the
// migration began by another instance are kept in the old layout alone,
// and a look that missed them would end the migration, after which
// lookups read the new layout only and those ids are saved again instead
// of found as duplicates.
func TestTheOldLayoutIsFoundEmptyOnlyByAReadThatSeesOtherInstancesIDs(t *testing.T) {
	m := newMigrationOnLaggingReplicas(t)
	// next's first save past the both-layouts phase starts the look.
	fresh := m.freshElsewhere(t)
	saveExpecting(t, m.nextHub, fresh, 1, 0)
	waitForIDMigrationCheck(t, m.next)
	if got := idBucketsOn(t, m.srv, m.db); got.IDBuckets != 4 || got.NextIDBuckets != 8 {
		t.Fatalf("settings after the look at the old layout: %+v; want the migration from 4 to 8 still under way", got)
	}
	m.clock.advance(time.Minute) // the settings are read again
	saveExpecting(t, m.oldHub, m.ns, 0, 1)
	drainExactly(t, m.oldHub, m.recipient, append(ids(m.ns), ids(fresh)...))
}

// Past the both-layouts phase a save writes the new layout only and reads
// both, so nothing it wrote makes a replica have the old layout's ids: its
// look-up must read the old buckets as their primaries have them. A resend
// of ids another instance saved before the migration began, kept in the old
// layout alone, read from a replica behind them, was stored a second time.
func TestAResendPastTheBothLayoutsPhaseFindsIDsOtherInstancesKeptInTheOldLayout(t *testing.T) {
	m := newMigrationOnLaggingReplicas(t)
	res, err := m.nextHub.Save(context.Background(), m.ns)
	switch {
	case err == nil && res.Saved != 0:
		t.Fatalf("the resend through the migrating instance = %+v; its id was stored again", res)
	case err != nil && !errors.Is(err, domain.ErrUnavailable):
		t.Fatalf("the resend through the migrating instance: %v; want duplicates, or unavailable while its replica shows the save pending", err)
	}
	t.Logf("the resend through the migrating instance: %+v, %v", res, err)
	saveExpecting(t, m.oldHub, m.ns, 0, 1)
	drainExactly(t, m.oldHub, m.recipient, ids(m.ns))
}
