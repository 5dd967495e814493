package cosmos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// The worst cases validation allows, against a test server that enforces
// Cosmos DB's limits (2 MB per request and item, 100 operations per batch,
// 512 KB per query): a refusal fails the test.

// requireLimits fails a test meant to prove a limit is kept when the
// package's server does not enforce the limits.
func requireLimits(t *testing.T) {
	t.Helper()
	if !server.Options.Limits {
		t.Fatal("the test server does not enforce Cosmos DB's limits (COSMOSTEST_OPTIONS?)")
	}
}

// openLarge opens a store whose containers have ten times the default
// throughput: a worst case costs tens of thousands of RU (a 150-cabinet save
// with long types about 33,000, draining it 68,000, mostly loads of 150
// entries and cursors), minutes at the default 1,000 RU/s. The limits are
// what these tests are about; throttling is tested elsewhere.
func openLarge(t *testing.T, cfg cosmos.Config) *cosmos.Store {
	t.Helper()
	cfg.Throughput = "autoscale=10000"
	return open(t, cfg)
}

// longType is a 255-character content or document type ending in i.
func longType(prefix string, i int) string {
	tail := fmt.Sprintf("%s-%06d", prefix, i)
	return strings.Repeat("x", domain.MaxContentTypeLength-len(tail)) + tail
}

// manyCabinets is a Save of n notifications for one recipient spread
// round-robin over cabinets 255-character content types, each with a
// distinct 255-character document type.
func manyCabinets(r string, n, cabinets int) []domain.Notification {
	ns := notifications(n, r, 1)
	for i := range ns {
		ns[i].ContentType = longType("ct", i%cabinets)
		ns[i].DocumentType = longType("dt", i)
	}
	return ns
}

// inCabinetOrder is the order Peek delivers manyCabinets in: cabinet by
// cabinet (each one's first notification is older than the next one's),
// each in save order.
func inCabinetOrder(ns []domain.Notification, cabinets int) []string {
	var out []string
	for c := range cabinets {
		for i := c; i < len(ns); i += cabinets {
			out = append(out, ns[i].ID)
		}
	}
	return out
}

// drainAll peeks and dequeues until nothing is left and returns the ids
// delivered.
func drainAll(t *testing.T, repo *hub.Hub, r string) []string {
	t.Helper()
	ctx := context.Background()
	var got []string
	for {
		b, err := repo.Peek(ctx, r, domain.GroupAll, "")
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			return got
		}
		got = append(got, b.NotificationIDs...)
		if err := repo.Dequeue(ctx, r, b.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// documentsOfType counts the recipient's documents of type typ, as of
// now: it first waits out the server's replica lag, as its query carries no
// session token.
func documentsOfType(t *testing.T, db, r, typ string) int {
	t.Helper()
	time.Sleep(server.Options.Lag)
	c, err := cosmostest.NewClient(t, server).NewContainer(db, "recipients")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	pager := c.NewQueryItemsPager("SELECT c.id FROM c WHERE c.t = @t", azcosmos.NewPartitionKeyString(r),
		&azcosmos.QueryOptions{QueryParameters: []azcosmos.QueryParameter{{Name: "@t", Value: typ}}})
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Items)
	}
	return n
}

// The largest Save validation allows, with the longest content type and
// distinct longest document types, fits Cosmos DB's request limits: page
// batches are sized by bytes, so no request is refused with 413.
func TestLargestSaveFitsTheRequestLimits(t *testing.T) {
	requireLimits(t)
	s := openLarge(t, cosmos.Config{})
	repo := hub.New(s, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	r := uuid.NewString()
	ns := manyCabinets(r, 10_000, 1)
	res, err := repo.Save(context.Background(), ns)
	if err != nil || res.Saved != len(ns) {
		t.Fatalf("save of 10,000 with 255-character types = %+v, %v", res, err)
	}
	state, err := s.LoadRecipient(context.Background(), r)
	if err != nil || len(state.Entries) != 1 {
		t.Fatalf("state = %+v, %v", state, err)
	}
	items, err := drawer.ReadRange(context.Background(), s.ReadDrawer, state.Entries[0].Drawers, 0, state.Entries[0].Total)
	if err != nil || len(items) != len(ns) || items[9_999].DocumentType != ns[9_999].DocumentType {
		t.Fatalf("read back %d of %d items, %v", len(items), len(ns), err)
	}
}

// 150 cabinets of one recipient in one Save take more catalog entries than
// one transactional batch may write: the reservation is written in several
// batches, and the save is delivered whole, in order.
func TestSaveOf150ContentTypesForOneRecipient(t *testing.T) {
	requireLimits(t)
	db := cosmostest.UniqueID("db")
	store := openLarge(t, cosmos.Config{Database: db})
	repo := hub.New(store, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	r := uuid.NewString()
	ns := manyCabinets(r, 10_000, 150)
	res, err := repo.Save(context.Background(), ns)
	if err != nil || res.Saved != len(ns) {
		t.Fatalf("save = %+v, %v", res, err)
	}
	state, err := store.LoadRecipient(context.Background(), r)
	if err != nil || len(state.Entries) != 150 || state.Head.Watermark != int64(len(ns)) {
		t.Fatalf("after the save: %d entries, head %+v, %v", len(state.Entries), state.Head, err)
	}
	if n := documentsOfType(t, db, r, "respart"); n != 0 {
		t.Fatalf("%d reservation parts left after the save", n)
	}
	if got := drainAll(t, repo, r); !slices.Equal(got, inCabinetOrder(ns, 150)) {
		t.Fatalf("delivered %d ids, want the %d saved, cabinet by cabinet", len(got), len(ns))
	}
}

// checkGivenBack checks that an aborted save of ns left nothing: no
// reservation, no parts, every position it took a recorded hole, its ids
// unknown; and that saving ns again delivers them.
func checkGivenBack(t *testing.T, db string, store *cosmos.Store, repo *hub.Hub, ns []domain.Notification, cabinets int) {
	t.Helper()
	ctx := context.Background()
	r := ns[0].Recipient
	state, err := store.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if state.Head.Watermark != state.Head.NextSeq-1 {
		t.Fatalf("a reservation is left: head %+v", state.Head)
	}
	if len(state.Entries) != cabinets {
		t.Fatalf("%d entries, want %d", len(state.Entries), cabinets)
	}
	for _, e := range state.Entries {
		if n := drawer.Held(e.Drawers, 0); n != 0 {
			t.Fatalf("cabinet %s: %d of the positions [0, %d) held, want all recorded holes: %+v", e.ContentType[240:], n, e.Total, e.Drawers)
		}
	}
	if n := documentsOfType(t, db, r, "respart"); n != 0 {
		t.Fatalf("%d reservation parts left after the rollback", n)
	}
	if found, err := store.LookupIDs(ctx, ids(ns)); err != nil || len(found) != 0 {
		t.Fatalf("ids of the aborted save are known: %d, %v", len(found), err)
	}
	res, err := repo.Save(ctx, ns)
	if err != nil || res.Saved != len(ns) {
		t.Fatalf("saving again: %+v, %v", res, err)
	}
	if got := drainAll(t, repo, r); !slices.Equal(got, inCabinetOrder(ns, cabinets)) {
		t.Fatalf("delivered %d ids, want the %d saved again, cabinet by cabinet", len(got), len(ns))
	}
}

// A save of 150 cabinets that fails after reserving gives back every
// position of every part of its reservation.
func TestAbortedSaveOf150ContentTypesGivesEveryPositionBack(t *testing.T) {
	requireLimits(t)
	db := cosmostest.UniqueID("db")
	f := newFaulty()
	store := openLarge(t, cosmos.Config{Database: db, Transport: f})
	repo := hub.New(store, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ns := manyCabinets(uuid.NewString(), 3_000, 150)
	abortSave(t, f, repo, ns)
	checkGivenBack(t, db, store, repo, ns, 150)
}

// A save of 150 cabinets whose process dies after writing everything is
// rolled back by another instance once its lease is over, from the parts
// of its reservation.
func TestExpiredReservationOf150ContentTypesIsRolledBackWhole(t *testing.T) {
	requireLimits(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	db := cosmostest.UniqueID("db")
	f := newFaulty()
	dying := hub.New(openLarge(t, cosmos.Config{Database: db, Transport: f, Now: clock, Lease: time.Minute}), hub.Options{}, nil)
	t.Cleanup(dying.Close)
	ns := manyCabinets(uuid.NewString(), 3_000, 150)
	// From the commit record's replace on, nothing reaches the server.
	f.dieAtCommit()
	if _, err := dying.Save(context.Background(), ns); err == nil {
		t.Fatal("save succeeded while the server was unreachable")
	}
	other := openLarge(t, cosmos.Config{Database: db, Now: clock, Lease: time.Minute})
	survivor := hub.New(other, hub.Options{}, nil)
	t.Cleanup(survivor.Close)
	if n := documentsOfType(t, db, ns[0].Recipient, "respart"); n == 0 {
		t.Fatal("the dead save left no reservation parts: the test does not test them")
	}
	now.Add(int64(2 * time.Minute))
	checkGivenBack(t, db, other, survivor, ns, 150)
}

// A bundle of thousands of notifications with distinct 255-character
// document types would list megabytes of them (8,000 make 2.06 MB, at
// Cosmos DB's 2 MB; 12,000, in a bundle of two saves, 3.1 MB): its document
// leaves them out (they are read back from the items), so peeking, peeking
// again and dequeuing fit.
func TestBundleOf12000DistinctDocumentTypes(t *testing.T) {
	requireLimits(t)
	db := cosmostest.UniqueID("db")
	store := openLarge(t, cosmos.Config{Database: db})
	repo := hub.New(store, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	ns := manyCabinets(r, 12_000, 1)
	for part := range slices.Chunk(ns, 6_000) {
		if _, err := repo.Save(ctx, part); err != nil {
			t.Fatal(err)
		}
	}
	want := make([]string, len(ns))
	for i, n := range ns {
		want[i] = n.DocumentType
	}
	first, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || first == nil || !slices.Equal(first.NotificationIDs, ids(ns)) || !slices.Equal(first.DocumentTypes, want) {
		t.Fatalf("peek: %v", err)
	}
	again, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || again == nil || again.ID != first.ID || !slices.Equal(again.DocumentTypes, want) {
		t.Fatalf("peek of the pending bundle: %v", err)
	}
	c, err := cosmostest.NewClient(t, server).NewContainer(db, "recipients")
	if err != nil {
		t.Fatal(err)
	}
	// Read on the primary (a transactional batch runs there): the peek
	// wrote the document a moment ago, and a point read without its session
	// token may be served by a replica that has not caught up with it yet.
	b := c.NewTransactionalBatch(azcosmos.NewPartitionKeyString(r))
	b.ReadItem("b:"+first.ID, nil)
	resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil || !resp.Success {
		t.Fatalf("read of the bundle document: %v (%+v)", err, resp.OperationResults)
	}
	if doc := resp.OperationResults[0].ResourceBody; len(doc) == 0 || len(doc) > 16<<10 {
		t.Fatalf("bundle document of %d bytes", len(doc))
	}
	if err := repo.Dequeue(ctx, r, first.ID); err != nil {
		t.Fatal(err)
	}
	if b, err := repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("after the dequeue: %v, %v", b, err)
	}
}

// A save whose part Cosmos DB refuses as too large (413) shares a group
// commit with another caller's save: the group is split, the other save is
// stored and only the refused one fails.
func TestAnOversizedSaveFailsAloneInItsGroupCommit(t *testing.T) {
	f := newFaulty()
	store := open(t, cosmos.Config{Transport: f})
	repo := hub.New(store, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	poisoned, healthy, first := uuid.NewString(), uuid.NewString(), uuid.NewString()
	held, release := make(chan struct{}), make(chan struct{})
	var hold sync.Once
	var refused atomic.Int32
	f.set(func(req *http.Request) int {
		if req.Method != http.MethodPost || !toContainer(req, "recipients") {
			return 0
		}
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		switch pk := req.Header.Get("x-ms-documentdb-partitionkey"); {
		case strings.Contains(pk, first) && bytes.Contains(body, []byte(`"Create"`)):
			hold.Do(func() { close(held) })
			<-release // holds the first group's commit while the others queue up
		case strings.Contains(pk, poisoned) && bytes.Contains(body, []byte(`"Create"`)):
			refused.Add(1)
			return http.StatusRequestEntityTooLarge
		}
		return 0
	})
	type outcome struct {
		r   string
		err error
	}
	outcomes := make(chan outcome, 3)
	save := func(r string) {
		_, err := repo.Save(ctx, notifications(3, r, 1))
		outcomes <- outcome{r, err}
	}
	go save(first)
	select {
	case <-held:
	case o := <-outcomes:
		t.Fatalf("the first save ended before its commit was held: %v", o.err)
	}
	go save(poisoned)
	go save(healthy)
	// Both queued while the first group is held: the next group takes
	// them together.
	for deadline := time.Now().Add(time.Minute); repo.QueuedSaves() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("%d saves queued behind the held group after a minute, want 2", repo.QueuedSaves())
		}
	}
	close(release)
	for range 3 {
		if o := <-outcomes; (o.err == nil) != (o.r != poisoned) {
			t.Errorf("save for %s: %v", map[bool]string{true: "the oversized one", false: "another"}[o.r == poisoned], o.err)
		}
	}
	if n := refused.Load(); n != 2 {
		t.Fatalf("the oversized part was refused %d times, want 2 (in the group, then alone)", n)
	}
	for r, want := range map[string]bool{first: true, healthy: true, poisoned: false} {
		b, err := repo.Peek(ctx, r, domain.GroupAll, "")
		if err != nil || (b != nil) != want {
			t.Fatalf("recipient stored = %v, want %v (%v)", b != nil, want, err)
		}
	}
}

// Retention of a recipient with 150 finished cabinets deletes 150 entries
// with their cursors: more than one transactional batch may hold. The
// sweep splits them (an entry with its cursor) and removes them all.
func TestSweepOf150FinishedCabinets(t *testing.T) {
	requireLimits(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	store := openLarge(t, cosmos.Config{Now: clock})
	repo := hub.New(store, hub.Options{Now: clock, Retention: time.Hour, SweepInterval: 50 * time.Millisecond}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	ns := manyCabinets(r, 150, 150)
	for i := range ns {
		// Short types: the batches' operations are the point, and each of
		// the 150 peeks loads every entry and cursor.
		ns[i].ContentType, ns[i].DocumentType = fmt.Sprintf("ct-%03d", i), "dt"
	}
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if got := drainAll(t, repo, r); len(got) != len(ns) {
		t.Fatalf("delivered %d of %d", len(got), len(ns))
	}
	now.Add(int64(2 * time.Hour))
	deadline := time.Now().Add(60 * time.Second)
	for {
		state, err := store.LoadRecipient(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if len(state.Entries) == 0 && len(state.Cursors) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after retention: %d entries and %d cursors left", len(state.Entries), len(state.Cursors))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// widestEntry is a cabinet's entry at its widest with the given number of
// drawers: a 255-character content type, drawer ids of 36 characters and
// every number at 2^53-1, the most a document keeps exact.
func widestEntry(drawers int) catalog.Entry {
	const widest = 1<<53 - 1
	e := catalog.Entry{Origin: domain.OriginMeteringPoints, ContentType: longType("ct", 0), Total: widest}
	for i := range drawers {
		e.Drawers = append(e.Drawers, drawer.Meta{
			ID: uuid.NewString(), Start: widest - int64(drawers-i)*drawer.Capacity, Count: drawer.Capacity,
			FirstSeq: widest, LastSeq: widest, FirstAt: widest, LastAt: widest,
		})
	}
	return e
}

// A cabinet at the bound of catalog.MaxDrawers, at its widest, is stored
// as an entry document holding the drawers of its last shelf's positions
// and a shelf document per shelf before: every document is a few KB
// whatever the drawers, so a save to the cabinet rewrites the entry alone,
// and the store loads the cabinet back whole.
func TestWidestEntryAtTheDrawerBoundFitsAnItem(t *testing.T) {
	requireLimits(t)
	db := cosmostest.UniqueID("db")
	// Unthrottled: the test writes the cabinet's documents at once.
	store := open(t, cosmos.Config{Database: db, Throughput: "manual=1000000"})
	c, err := cosmostest.NewClient(t, server).NewContainer(db, "recipients")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := uuid.NewString()
	e := widestEntry(catalog.MaxDrawers)
	docs, err := cosmos.EntryDocuments(r, e)
	if err != nil {
		t.Fatal(err)
	}
	widest, all := 0, 0
	for _, raw := range docs {
		widest, all = max(widest, len(raw)), all+len(raw)
	}
	t.Logf("widest cabinet of %d drawers: %d documents, %d bytes in all; entry document %d bytes, widest document %d bytes",
		catalog.MaxDrawers, len(docs), all, len(docs[0]), widest)
	if widest > 8<<10 {
		t.Fatalf("a document of the widest cabinet is %d bytes, want under 8 KB", widest)
	}
	for chunk := range slices.Chunk(docs, 100) {
		b := c.NewTransactionalBatch(azcosmos.NewPartitionKeyString(r))
		for _, raw := range chunk {
			b.UpsertItem(raw, nil)
		}
		resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
		if err != nil || !resp.Success {
			t.Fatalf("storing the widest cabinet: %v", err)
		}
	}
	time.Sleep(server.Options.Lag) // written by another client: let the replicas catch up
	state, err := store.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(state.Entries) != 1 || state.Entries[0].ContentType != e.ContentType || len(state.Entries[0].Drawers) != catalog.MaxDrawers ||
		state.Entries[0].Drawers[catalog.MaxDrawers-1] != e.Drawers[catalog.MaxDrawers-1] {
		t.Fatalf("loaded %d entries, want the widest one back whole", len(state.Entries))
	}
}

// A dequeued bundle's document names its drawers and carries no ttl: only
// the sweeper, which deletes those drawers with it, may remove it; a TTL
// that ran first would leave drawers no entry names behind for ever.
func TestADequeuedBundleNamingDrawersHasNoTTL(t *testing.T) {
	db := cosmostest.UniqueID("db")
	store := open(t, cosmos.Config{Database: db})
	repo := hub.New(store, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	if _, err := repo.Save(ctx, notifications(3, r, 1)); err != nil {
		t.Fatal(err)
	}
	b, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v %v", b, err)
	}
	if err := repo.Dequeue(ctx, r, b.ID); err != nil {
		t.Fatal(err)
	}
	c, err := cosmostest.NewClient(t, server).NewContainer(db, "recipients")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(server.Options.Lag)
	resp, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString(r), "b:"+b.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		t.Fatal(err)
	}
	if drawers, _ := doc["dr"].([]any); len(drawers) != 1 || doc["ttl"] != nil || doc["t"] != "dequeued" {
		t.Fatalf("dequeued bundle document %v, want one drawer named and no ttl", doc)
	}
}

// A Save of more cabinets than a save may write on Cosmos DB is refused at
// once, as the client's error, and stores nothing: 10,000 notifications in
// 10,000 content types would take minutes at the default throughput and
// outlast the hub's deadline.
func TestASaveOfTooManyCabinetsIsRefusedAtOnce(t *testing.T) {
	store := open(t, cosmos.Config{})
	repo := hub.New(store, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	r := uuid.NewString()
	ns := manyCabinets(r, 10_000, 10_000)
	_, err := repo.Save(context.Background(), ns)
	if !errors.Is(err, domain.ErrInvalidArgument) || !strings.Contains(err.Error(), "at most 250 cabinets") {
		t.Fatalf("a Save of 10,000 cabinets: %v, want INVALID_ARGUMENT naming the limit", err)
	}
	if got := drainAll(t, repo, r); len(got) != 0 {
		t.Fatalf("%d notifications of a refused Save delivered", len(got))
	}
	// Nothing of it is held: a Save within the limit is stored.
	if res, err := repo.Save(context.Background(), ns[:1]); err != nil || res.Saved != 1 {
		t.Fatalf("a Save of one of them after the refusal: %+v, %v", res, err)
	}
}

// The largest valid Save (MaxCabinetsPerSave cabinets of the longest content
// and document types) finishes at the default throughput. Its time is
// logged, not asserted (the machine's speed is no property of the code):
// the caller allows it two minutes, as a client of a slow account would.
func TestASaveOfTheMostCabinetsFinishes(t *testing.T) {
	requireLimits(t)
	store := open(t, cosmos.Config{})
	repo := hub.New(store, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	r := uuid.NewString()
	ns := manyCabinets(r, 10_000, cosmos.MaxCabinetsPerSave)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	before := cosmos.Total(store.Meter().Snapshot())
	res, err := repo.Save(ctx, ns)
	if err != nil || res.Saved != len(ns) {
		t.Fatalf("save = %+v, %v", res, err)
	}
	after := cosmos.Total(store.Meter().Snapshot())
	t.Logf("a Save of %d notifications in %d cabinets took %s: %d requests, %.0f RU, %d bytes sent",
		len(ns), cosmos.MaxCabinetsPerSave, time.Since(start).Round(time.Millisecond),
		after.Requests-before.Requests, after.RequestCharge-before.RequestCharge, after.RequestBytes-before.RequestBytes)
}
