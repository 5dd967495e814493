package content_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/apiconv"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// Two retention passes may run at once (the sweeper's turn and an
// operator's SweepNow). One that planned to remove a dequeued bundle, and
// goes on only after the other removed it and the actor peeked with its id
// again, removes the document of the later bundle under the id: its domain
// is asked again, and the actor may get another document for the bundle.
func TestAStaleSweepSparesTheDocumentOfALaterBundleOfItsID(t *testing.T) {
	ctx := within(t, time.Minute)
	const retention = time.Hour
	s, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := content.OpenDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = docs.Close() })
	var mu sync.Mutex
	ahead := time.Duration(0) // how far the test moved the clock
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(ahead) }

	// The first pass to remove documents stops there until the test
	// lets it go on.
	planned, goOn := make(chan struct{}), make(chan struct{})
	forget := content.Forget(docs)
	var forgets atomic.Int32
	forgetBundles := func(ctx context.Context, recipient string, ids []string, asRead func(context.Context) error) error {
		if forgets.Add(1) == 1 {
			close(planned)
			<-goOn
		}
		return forget(ctx, recipient, ids, asRead)
	}
	waits := make(chan struct{}, 1) // a pass logged that it waits for the one running
	logger := slog.New(lineHandler{hub.RetentionWaits, waits})
	repo := hub.New(s, hub.Options{Retention: retention, ForgetBundles: forgetBundles, Now: now}, logger)
	t.Cleanup(func() { repo.Close(); _ = s.Close() })
	a := newIDActor(ctx, t, repo, docs, s)
	id, save, peek, document := a.id, a.save, a.peek, a.document

	a.dequeuedWithItsDocument()
	mu.Lock()
	ahead = retention + time.Hour
	mu.Unlock()

	stale, fresh := make(chan error, 1), make(chan error, 1)
	go func() { stale <- repo.SweepNow(ctx) }()
	<-planned
	go func() { fresh <- repo.SweepNow(ctx) }()
	var later *domain.Bundle
	var first string
	select {
	case err := <-fresh:
		// The second pass freed the id while the first one waited: the
		// actor peeks with it again and gets the later bundle's document.
		if err != nil {
			t.Fatal(err)
		}
		save()
		later = peek()
		first = document(later)
		close(goOn)
	case <-waits:
		// The second pass waits for the first, which frees the id.
		close(goOn)
		if err := <-fresh; err != nil {
			t.Fatal(err)
		}
		save()
		later = peek()
		first = document(later)
	}
	if err := <-stale; err != nil {
		t.Fatal(err)
	}
	if got := document(later); got != first {
		t.Fatalf("the bundle %s was served %q, then %q after a stale sweep", id, first, got)
	}
}

// lineHandler is a slog.Handler that tells of each record whose message is
// line, on heard (without waiting), and drops everything.
type lineHandler struct {
	line  string
	heard chan<- struct{}
}

func (lineHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h lineHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.line {
		select {
		case h.heard <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h lineHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h lineHandler) WithGroup(string) slog.Handler      { return h }

// idActor is an actor that peeks with one bundle id of its own, again
// after each bundle under it is gone, and reads the bundles' documents
// through a service whose domain answers another document at each call.
type idActor struct {
	t             *testing.T
	ctx           context.Context
	repo          *hub.Hub
	service       *content.Service
	recipient, id string
}

func newIDActor(ctx context.Context, t *testing.T, repo *hub.Hub, docs content.Store, lease content.Lease) *idActor {
	t.Helper()
	provider := contenttest.Start(t, func(b *messagehubv1.Bundle, calls int) contenttest.Answer {
		return contenttest.Document("text/plain", fmt.Appendf(nil, "%s #%d", strings.Join(b.GetNotificationIds(), ","), calls), 1024)
	})
	service := content.NewService(content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Store:     docs, Pending: repo.IsPending, Holds: repo.HoldsBundle, Lease: lease,
	})
	t.Cleanup(service.Close)
	return &idActor{t: t, ctx: ctx, repo: repo, service: service, recipient: uuid.NewString(), id: uuid.NewString()}
}

// save saves one notification for the actor.
func (a *idActor) save() {
	a.t.Helper()
	n := domain.Notification{ID: uuid.NewString(), Recipient: a.recipient, Origin: domain.OriginTimeSeries, ContentType: "c", DocumentType: "c", Weight: 1}
	if _, err := a.repo.Save(a.ctx, []domain.Notification{n}); err != nil {
		a.t.Fatal(err)
	}
}

// peek peeks naming the actor's id, and wants a bundle under it.
func (a *idActor) peek() *domain.Bundle {
	a.t.Helper()
	b, err := a.repo.Peek(a.ctx, a.recipient, domain.GroupAll, a.id)
	if err != nil || b == nil || b.ID != a.id {
		a.t.Fatalf("peek naming %s: %+v %v", a.id, b, err)
	}
	return b
}

// document reads the bundle's document, built by its domain if none is stored.
func (a *idActor) document(b *domain.Bundle) string {
	a.t.Helper()
	return documentOf(a.ctx, a.t, a.service, b)
}

// dequeuedWithItsDocument saves a notification, peeks it under the actor's
// id, has its document built and dequeues it.
func (a *idActor) dequeuedWithItsDocument() {
	a.t.Helper()
	a.save()
	a.document(a.peek())
	if err := a.repo.Dequeue(a.ctx, a.recipient, a.id); err != nil {
		a.t.Fatal(err)
	}
}

// documentOf reads the bundle's document through service, built by its
// domain if none is stored.
func documentOf(ctx context.Context, t *testing.T, service *content.Service, b *domain.Bundle) string {
	t.Helper()
	doc, err := service.Document(ctx, apiconv.Bundle(b))
	if err != nil {
		t.Fatal(err)
	}
	return string(read(t, doc))
}
