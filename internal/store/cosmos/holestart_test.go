package cosmos_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// Instance A's save opens a drawer just before a shelf's positions end and
// fills it up to them; while it is in flight, instance B's save appends to
// that drawer past the shelf's end. A's save then fails: its positions,
// the drawer's first ones, become a hole, and the hub sees the drawer as
// the run of B's positions alone, which starts on the next shelf. The next
// save must not take the drawers before it out of the catalog: with a
// shelf of one drawer, the drawer of the first notification (stored in the
// entry, never on a shelf) was moved onto a shelf no batch wrote, and that
// notification, acknowledged, was never delivered.
func TestASaveAfterAHoleAtADrawersStartKeepsTheDrawersBeforeIt(t *testing.T) {
	cosmos.SetShelfDrawers(t, 1) // shelves of drawer.Capacity positions
	db := cosmostest.UniqueID("db")
	fa, holding, release := heldFailingCommit(t)
	a, b, sb, fb := twoHubs(t, db, fa, hub.Options{})
	ctx := context.Background()
	r := uuid.NewString()
	first, appended := holeAtADrawersStart(t, a, b, sb, fb, holding, release, r)
	last := notifications(1, r, 1)
	if _, err := b.Save(ctx, last); err != nil {
		t.Fatal(err)
	}
	expectShelves(t, sb, db, r)
	drainExactly(t, b, r, ids(slices.Concat(first, appended, last)))
}

// The cabinet of TestASaveAfterAHoleAtADrawersStartKeepsTheDrawersBeforeIt,
// drained, goes with its retention: the batch that deletes its entry
// deletes the shelves it is stored with, no more. The drawer of the first
// notification is in the entry document, on no shelf, though the drawer
// after it, seen as the run of B's position alone, starts on the next
// shelf: a delete of a shelf no save wrote fails the batch, and every sweep
// after, so the cabinet, its drawers and its notifications' ids stayed for
// good.
func TestADrainedCabinetWhoseLastDrawerStartsInAHoleGoesWithItsRetention(t *testing.T) {
	cosmos.SetShelfDrawers(t, 1) // shelves of drawer.Capacity positions
	db := cosmostest.UniqueID("db")
	clock := &costClock{now: time.Now()}
	fa, holding, release := heldFailingCommit(t)
	a, b, sb, fb := twoHubs(t, db, fa, hub.Options{Retention: time.Hour, SweepInterval: time.Hour, Now: clock.Now})
	ctx := context.Background()
	r := uuid.NewString()
	first, appended := holeAtADrawersStart(t, a, b, sb, fb, holding, release, r)
	drainExactly(t, b, r, ids(slices.Concat(first, appended)))
	for range 2 { // a pass that failed is taken up by the next
		clock.advance(2 * time.Hour)
		if err := b.SweepNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if state, err := sb.LoadRecipient(ctx, r); err != nil || len(state.Entries)+len(state.Cursors) != 0 {
		t.Fatalf("the drained cabinet is left past its retention: %+v, %v", state, err)
	}
	if found, err := sb.LookupIDs(ctx, ids(slices.Concat(first, appended))); err != nil || len(found) != 0 {
		t.Fatalf("retention left the ids %v, %v", found, err)
	}
	if n := countDocs(t, db, "drawers"); n != 0 {
		t.Fatalf("retention left %d pages", n)
	}
}

// holeAtADrawersStart saves for r, through b, a notification at position 0
// and a failed save's hole at position 1; then, through a, a save opening
// the next drawer at position 2 up to the first shelf's end, which fails,
// while b appends one notification at position drawer.Capacity to that
// drawer. It returns b's two saved notifications.
func holeAtADrawersStart(t *testing.T, a, b *hub.Hub, sb *cosmos.Store, fb *faulty, holding, release chan struct{}, r string) (first, appended []domain.Notification) {
	t.Helper()
	ctx := context.Background()
	first = notifications(1, r, 1) // position 0, in the cabinet's first drawer
	if _, err := b.Save(ctx, first); err != nil {
		t.Fatal(err)
	}
	abortSave(t, fb, b, notifications(1, r, 1)) // position 1: a hole at the drawer's tail
	// A's save opens the next drawer at position 2 and fills it up to the
	// shelf's end (drawer.Capacity), one position short of full.
	failing := notifications(drawer.Capacity-2, r, 1)
	appended = notifications(1, r, 1) // position drawer.Capacity, in A's drawer
	saveBesideAFailingSave(t, a, b, holding, release, failing, appended)
	state, err := sb.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if d := state.Entries[0].Drawers; len(d) != 2 || d[0].Start != 0 || d[0].Count != 1 || d[1].Start != drawer.Capacity || d[1].Count != 1 {
		t.Fatalf("the cabinet's runs are %+v; want [0, 1) and [%d, %d): the test tested something else", d, drawer.Capacity, drawer.Capacity+1)
	}
	return first, appended
}

// heldFailingCommit is the network of an instance whose saves fail at
// their commit, every attempt refused; the first commit is held until
// release is closed (holding is closed then), so that another instance
// saves while that save is in flight.
func heldFailingCommit(t *testing.T) (f *faulty, holding, release chan struct{}) {
	t.Helper()
	holding, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	f = newFaulty()
	f.set(func(req *http.Request) int {
		if !toContainer(req, "saves") || req.Method != http.MethodPut || !commits(t, req) {
			return 0
		}
		once.Do(func() {
			close(holding)
			<-release
		})
		return http.StatusForbidden
	})
	return f, holding, release
}

// saveBesideAFailingSave saves failing through a, whose network is
// heldFailingCommit's, and while its commit is held saves beside through b:
// a's save fails, b's succeeds.
func saveBesideAFailingSave(t *testing.T, a, b *hub.Hub, holding, release chan struct{}, failing, beside []domain.Notification) {
	t.Helper()
	ctx := context.Background()
	fromA := saveHeld(t, a, failing, holding)
	_, errB := b.Save(ctx, beside)
	close(release)
	if err := <-fromA; err == nil {
		t.Fatal("A's save succeeded though its commit was refused")
	}
	if errB != nil {
		t.Fatalf("B's save while A's was in flight: %v", errB)
	}
}

// twoHubs opens two instances of opts on db: a through fa's network, b on
// its store sb through a network of its own, fb.
func twoHubs(t *testing.T, db string, fa *faulty, opts hub.Options) (a, b *hub.Hub, sb *cosmos.Store, fb *faulty) {
	t.Helper()
	a = hub.New(open(t, cosmos.Config{Database: db, Transport: fa}), opts, nil)
	t.Cleanup(a.Close)
	fb = newFaulty()
	sb = open(t, cosmos.Config{Database: db, Transport: fb})
	b = hub.New(sb, opts, nil)
	t.Cleanup(b.Close)
	return a, b, sb, fb
}

// saveHeld saves ns through a in the background, and returns once the
// save is held (holding is closed) the channel its answer comes on.
func saveHeld(t *testing.T, a *hub.Hub, ns []domain.Notification, holding chan struct{}) <-chan error {
	t.Helper()
	fromA := make(chan error, 1)
	go func() {
		_, err := a.Save(context.Background(), ns)
		fromA <- err
	}()
	select {
	case <-holding:
	case err := <-fromA:
		t.Fatalf("A's save answered %v before it was held", err)
	}
	return fromA
}

// commits says req's body makes a commit record committed; the body is
// left as it was.
func commits(t *testing.T, req *http.Request) bool {
	t.Helper()
	if req.Body == nil {
		return false
	}
	raw, err := io.ReadAll(req.Body)
	if err != nil {
		t.Error(err)
	}
	req.Body = io.NopCloser(bytes.NewReader(raw))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
	return bytes.Contains(raw, []byte(`"state":"committed"`))
}
