package cosmos_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A save writes what does not depend on each other at once (save.go,
// write): a recipient's pages go as soon as its own reservation holds,
// whatever another recipient's reservation is doing; a recipient's finalize
// replaces the head its reservation wrote without reading it first. The
// tests below hold each of those orderings in place and put the faults of
// writeFaults on it.

// hookTransport calls before for every request it is about to send, and
// after once its answer came back.
type hookTransport struct {
	next   *http.Client
	before func(*http.Request)
	after  func(*http.Request, *http.Response)
}

func (h *hookTransport) Do(req *http.Request) (*http.Response, error) {
	if h.before != nil {
		h.before(req)
	}
	resp, err := h.next.Do(req)
	if err == nil && h.after != nil {
		h.after(req, resp)
	}
	return resp, err
}

// isBatch says req is a transactional batch in container name of the
// partition pk (any partition when pk is empty).
func isBatch(req *http.Request, name, pk string) bool {
	return req.Header.Get("x-ms-cosmos-is-batch-request") != "" && toContainer(req, name) &&
		(pk == "" || strings.Contains(req.Header.Get("x-ms-documentdb-partitionkey"), pk))
}

// A save over two recipients whose second reservation fails after the
// first recipient's pages are written: the save fails and shows nothing (or
// succeeds, when the failure was an answer lost once), the resend delivers
// both recipients' notifications exactly once, and neither cabinet sticks.
// The second reserve batch is held until a page batch has been answered,
// so the pages are written while the reservation is still to fail.
func TestPagesWrittenBeforeAnotherRecipientsReservationFailsAreRolledBack(t *testing.T) {
	for _, f := range writeFaults {
		t.Run(faultCase("second reserve batch", f.kind, f.count), func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			first, second := uuid.NewString(), uuid.NewString()
			pagesWritten := make(chan struct{})
			var once sync.Once
			var saving, recordSent, heldTooLong atomic.Bool
			transport := &hookTransport{
				next: cosmostest.NewHTTPClient(),
				before: func(req *http.Request) {
					// The save's batches on the second recipient after its
					// commit record (the load's reads come before).
					if saving.Load() && toContainer(req, "saves") && req.Method == http.MethodPost {
						recordSent.Store(true)
					}
					if !recordSent.Load() || !isBatch(req, "recipients", second) {
						return
					}
					select {
					case <-pagesWritten:
					case <-req.Context().Done():
						heldTooLong.Store(true)
					}
				},
				after: func(req *http.Request, _ *http.Response) {
					if isBatch(req, "drawers", "") {
						once.Do(func() { close(pagesWritten) })
					}
				},
			}
			repo := hub.New(open(t, cosmos.Config{Database: db, Transport: transport}), hub.Options{}, nil)
			t.Cleanup(repo.Close)
			ctx := context.Background()
			ns := append(notifications(3, first, 1), notifications(3, second, 1)...)
			inject(t, db, cosmostest.Fault{Kind: f.kind, Count: f.count, Ops: []string{"batch"}, Coll: "recipients",
				Type: "head", Body: fmt.Sprintf(`"pk":"%s"`, second)})
			saving.Store(true)
			_, err := repo.Save(ctx, ns)
			if heldTooLong.Load() {
				t.Fatal("no page batch was answered while the second recipient's reservation waited: pages wait for every reservation")
			}
			if fired(t, db) == 0 {
				t.Fatal("the fault never fired; the test tested nothing")
			}
			clearFaults(t, db)
			if err != nil && refused(f.kind) {
				for _, r := range []string{first, second} {
					if b, perr := repo.Peek(ctx, r, domain.GroupAll, ""); perr != nil || b != nil {
						t.Fatalf("peek of %s after a refused save (%v) = %v, %v; want nothing", r, err, b, perr)
					}
				}
			}
			saveAsTheHub(t, repo, db, ns, err)
			drainExactly(t, repo, first, ids(ns[:3]))
			drainExactly(t, repo, second, ids(ns[3:]))
		})
	}
}

// A save's finalize replaces the head its reservation wrote, on that
// version; when another instance's save reserved and finalized the
// recipient meanwhile, the replace is refused (412), the head is read and
// the finalize applied to it. Both saves are delivered, in order, once;
// the finalize's replace also meets every fault.
func TestAFinalizeAfterAnotherSaveMovedTheHeadReadsItAgain(t *testing.T) {
	for _, f := range writeFaults {
		t.Run(faultCase("finalize of a moved head", f.kind, f.count), func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			ctx := context.Background()
			r := uuid.NewString()
			mine, theirs := notifications(3, r, 1), notifications(2, r, 1)
			other := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
			t.Cleanup(other.Close)
			var once sync.Once
			var otherErr, faultErr error
			var refusedFinalize atomic.Int64
			t.Cleanup(func() { _ = server.ClearFaults(db) })
			transport := &hookTransport{
				next: cosmostest.NewHTTPClient(),
				before: func(req *http.Request) {
					// Just before this save commits, the other instance saves
					// the same recipient: it reserves after this save and
					// finalizes before it.
					if toContainer(req, "saves") && req.Method == http.MethodPut {
						once.Do(func() {
							_, otherErr = other.Save(ctx, theirs)
							faultErr = server.AddFaults(cosmostest.Fault{Kind: f.kind, Count: f.count, DB: db,
								Ops: []string{"replace"}, Coll: "recipients", ID: "^head$"})
						})
					}
				},
				after: func(req *http.Request, resp *http.Response) {
					if toContainer(req, "recipients") && req.Method == http.MethodPut && resp.StatusCode == http.StatusPreconditionFailed {
						refusedFinalize.Add(1)
					}
				},
			}
			repo := hub.New(open(t, cosmos.Config{Database: db, Transport: transport}), hub.Options{}, nil)
			t.Cleanup(repo.Close)
			_, err := repo.Save(ctx, mine)
			if otherErr != nil || faultErr != nil {
				t.Fatalf("the other instance's save: %v; the fault: %v", otherErr, faultErr)
			}
			if fired(t, db) == 0 {
				t.Fatal("the fault never fired; the test tested nothing")
			}
			clearFaults(t, db)
			if err != nil {
				t.Fatalf("a committed save failed: %v", err)
			}
			if refusedFinalize.Load() == 0 {
				t.Fatal("the finalize's replace was never refused: the head it wrote was not the one it replaced")
			}
			drainExactly(t, repo, r, append(ids(mine), ids(theirs)...))
		})
	}
}

// A save takes its positions in the catalog entry before it writes their
// pages, and another instance's save of the same cabinet may take and write
// the positions after them meanwhile. A Peek that reads the cabinet's first
// waiting position then finds it unwritten: its drawer's last sequence
// number is above the watermark, so the cabinet waits for the save (a read
// that lags is told apart only below the watermark), and the Peek delivers
// what is visible, another cabinet's older notification, without an error.
func TestAPeekBesideASaveInFlightBehindAnotherInstancesSaveDeliversWhatIsVisible(t *testing.T) {
	db := cosmostest.UniqueID("db")
	ctx := context.Background()
	r := uuid.NewString()
	note := func(origin domain.Origin, contentType string) domain.Notification {
		return domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: origin, ContentType: contentType,
			DocumentType: contentType, SupportsBundling: true, Weight: 1}
	}
	ts := func() domain.Notification { return note(domain.OriginTimeSeries, "rsm-012") }
	charges := func() domain.Notification { return note(domain.OriginCharges, "rsm-033") }
	other := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(other.Close)

	// The time series cabinet is acknowledged up to a position whose
	// sequence number its cursor does not know (its last bundle ended with
	// the cabinet), in a drawer whose numbers are not consecutive (the
	// charges cabinet's are between them).
	first := []domain.Notification{ts(), charges()}
	if _, err := other.Save(ctx, first); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, other, r, ids(first))
	older := charges()
	if _, err := other.Save(ctx, []domain.Notification{older}); err != nil {
		t.Fatal(err)
	}

	inFlight, behind := ts(), ts()
	var once sync.Once
	var saving atomic.Bool
	var peeked *domain.Bundle
	var peekErr, behindErr error
	transport := &hookTransport{
		next: cosmostest.NewHTTPClient(),
		before: func(req *http.Request) {
			// Pages go once the reservation holds: while this save's
			// wait, the other instance saves the cabinet behind it and
			// peeks.
			if saving.Load() && isBatch(req, "drawers", "") {
				once.Do(func() {
					_, behindErr = other.Save(ctx, []domain.Notification{behind})
					peeked, peekErr = other.Peek(ctx, r, domain.GroupAll, "")
				})
			}
		},
	}
	repo := hub.New(open(t, cosmos.Config{Database: db, Transport: transport}), hub.Options{}, nil)
	t.Cleanup(repo.Close)
	saving.Store(true)
	if _, err := repo.Save(ctx, []domain.Notification{inFlight}); err != nil {
		t.Fatal(err)
	}
	saving.Store(false)
	if behindErr != nil {
		t.Fatalf("the other instance's save: %v", behindErr)
	}
	if peekErr != nil || peeked == nil || !slices.Equal(peeked.NotificationIDs, []string{older.ID}) {
		t.Fatalf("peek while a save of the time series cabinet is in flight = %+v, %v; want the older charge %s", peeked, peekErr, older.ID)
	}
	if err := other.Dequeue(ctx, r, peeked.ID); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, repo, r, []string{inFlight.ID, behind.ID})
}
