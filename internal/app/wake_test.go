package app_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/app"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// bellReads records how the reads of the bells under an instance's hub
// end: failed is the number of reads that failed in a row.
type bellReads struct {
	store.Store
	failed atomic.Int64
}

func (b *bellReads) ReadBells(ctx context.Context, cursor string) ([]string, string, error) {
	recipients, next, err := b.Store.ReadBells(ctx, cursor)
	if err != nil {
		b.failed.Add(1)
	} else {
		b.failed.Store(0)
	}
	return recipients, next, err
}

// cosmosConfig is testConfig on Cosmos DB: database db on srv.
func cosmosConfig(t *testing.T, srv *cosmostest.Server, db string) app.Config {
	t.Helper()
	cfg, err := app.ParseConfig([]string{
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--store", "cosmos", "--cosmos-endpoint", srv.Endpoint, "--cosmos-key", srv.Key, "--cosmos-database", db,
	}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ShutdownTimeout = shutdownTimeout
	return cfg
}

// twoInstances starts two instances on one new database of a test server
// (up to 200 ms of replica lag), the first with its bell reads recorded and
// its waiting Peeks re-checking every recheckA (server.DefaultWaitRecheck
// when zero).
func twoInstances(t *testing.T, recheckA time.Duration) (srv *cosmostest.Server, db string, a, b *running, reads *bellReads) {
	t.Helper()
	srv = cosmostest.Start(t)
	db = cosmostest.UniqueID("wake")
	cfgA := cosmosConfig(t, srv, db)
	app.SetWaitRecheck(&cfgA, recheckA)
	reads = &bellReads{}
	app.WrapStore(&cfgA, func(s store.Store) store.Store { reads.Store = s; return reads })
	a = start(t, cfgA)
	b = start(t, cosmosConfig(t, srv, db))
	return srv, db, a, b, reads
}

// waitingPeek starts a Peek of recipient on r waiting up to 20 s, returns
// when the instance holds it as a waiter, and gives its answer on the
// channel with the moment it came.
func waitingPeek(t *testing.T, r *running, recipient string) <-chan peekAnswer {
	t.Helper()
	answers := make(chan peekAnswer, 1)
	go func() {
		resp, err := r.client.Peek(callContext(t), &messagehubv1.PeekRequest{Recipient: recipient, WaitMs: 20_000})
		answers <- peekAnswer{resp: resp, err: err, at: time.Now()}
	}()
	deadline := time.Now().Add(callTimeout)
	for app.Waiting(r.app) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the Peek never waited")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return answers
}

type peekAnswer struct {
	resp *messagehubv1.PeekResponse
	err  error
	at   time.Time
}

// saveThrough saves one notification for recipient through r and returns
// when the Save answered.
func saveThrough(t *testing.T, r *running, recipient string) time.Time {
	t.Helper()
	if _, err := r.client.Save(callContext(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{notification(recipient)}}); err != nil {
		t.Fatalf("Save: %v", err)
	}
	return time.Now()
}

func expectBundle(t *testing.T, got peekAnswer) {
	t.Helper()
	if got.err != nil {
		t.Fatalf("the waiting Peek: %v", got.err)
	}
	if n := len(got.resp.GetBundle().GetNotificationIds()); n != 1 {
		t.Fatalf("the waiting Peek answered %d notifications, want the 1 saved", n)
	}
}

// A Peek waiting on one instance answers with the bundle after a Save
// through another instance on the same Cosmos DB database: the saving
// instance rings a bell, the waiting one reads it within its poll of 0.5 s
// and the replicas' lag. Its re-check is an hour away and its wait 20 s, so
// only the bell can have woken it, however long a busy machine takes.
func TestASaveThroughAnotherInstanceWakesAWaitingPeek(t *testing.T) {
	_, _, a, b, _ := twoInstances(t, time.Hour)
	for range 3 {
		recipient := uuid.NewString()
		answers := waitingPeek(t, a, recipient)
		saved := saveThrough(t, b, recipient)
		got := <-answers
		expectBundle(t, got)
		t.Logf("the waiting Peek answered %s after the Save through the other instance answered", got.at.Sub(saved).Round(time.Millisecond))
	}
}

// When the bells cannot be read (the feed refused), a waiting Peek still
// finds a Save through another instance: the waiter re-checks every 5 s
// from the moment the reads fail, and the failure is counted.
func TestAWaitingPeekReChecksWhileTheBellsCannotBeRead(t *testing.T) {
	srv, db, a, b, reads := twoInstances(t, 0)
	recipient := uuid.NewString()
	answers := waitingPeek(t, a, recipient) // asleep while the bells are read
	if err := srv.AddFaults(cosmostest.Fault{Kind: cosmostest.Refuse503, Ops: []string{"readfeed"}, DB: db, Coll: "bells"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(callTimeout)
	for reads.failed.Load() < 2 { // past a read that began before the fault
		if time.Now().After(deadline) {
			t.Fatal("the bells' reads never failed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	saved := saveThrough(t, b, recipient)
	got := <-answers
	expectBundle(t, got)
	t.Logf("with the bells refused, the waiting Peek answered %s after the Save", got.at.Sub(saved).Round(time.Millisecond))
	if reads.failed.Load() == 0 {
		t.Fatal("the bells were read again meanwhile: the re-check is not what found the Save")
	}
	if !strings.Contains(scrape(t, a), `messagehub_wake_bell_errors_total{operation="read"`) {
		t.Fatal("the failed reads of the bells are not counted")
	}
}

// scrape returns the instance's metrics.
func scrape(t *testing.T, r *running) string {
	t.Helper()
	req, err := http.NewRequestWithContext(callContext(t), http.MethodGet, "http://"+r.app.HTTPAddr()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
