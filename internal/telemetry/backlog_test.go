package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/figures"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
	"github.com/energydatahub/messagehub/internal/telemetry"
)

// scrape returns the value of one series of the exposition.
func scrape(t *testing.T, tel *telemetry.Telemetry, series string) (float64, bool) {
	t.Helper()
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v, true
}

func TestTheBacklogGaugesFollowTheStore(t *testing.T) {
	st, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	repo := hub.New(st, hub.Options{}, nil)
	defer func() { repo.Close(); _ = st.Close() }()
	ctx := context.Background()
	recipient := uuid.NewString()
	notes := make([]domain.Notification, 7)
	for i := range notes {
		notes[i] = domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges,
			ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: 1}
	}
	if _, err := repo.Save(ctx, notes); err != nil {
		t.Fatal(err)
	}
	// Two of them in a pending bundle of their own.
	other := uuid.NewString()
	for range 2 {
		n := notes[0]
		n.ID, n.Recipient = uuid.NewString(), other
		if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := repo.Peek(ctx, other, domain.GroupAll, ""); err != nil || b == nil {
		t.Fatalf("peek: %v %v", b, err)
	}

	tel, err := telemetry.Setup(ctx, "test", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{}, 10)
	if err := figures.New(st, figures.Options{}).Recount(ctx); err != nil {
		t.Fatal(err)
	}
	stop, err := tel.WatchBacklog(func(ctx context.Context) (store.BacklogFigures, error) {
		defer func() { read <- struct{}{} }()
		return st.ReadFigures(ctx, store.FigureTotals)
	}, time.Hour, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	<-read // the first read is at once
	stop()

	if v, ok := scrape(t, tel, `messagehub_backlog_notifications{origin="DOMAIN_CHARGES"}`); !ok || v != 9 {
		t.Errorf("charges backlog %v (%v), want 9", v, ok)
	}
	if v, ok := scrape(t, tel, `messagehub_backlog_pending_bundles{origin="DOMAIN_CHARGES"}`); !ok || v != 1 {
		t.Errorf("pending charges bundles %v (%v), want 1", v, ok)
	}
	if v, ok := scrape(t, tel, `messagehub_backlog_pending_bundles{origin="DOMAIN_TIME_SERIES"}`); !ok || v != 0 {
		t.Errorf("pending time series bundles %v (%v), want 0", v, ok)
	}
	if age, ok := scrape(t, tel, `messagehub_backlog_pending_oldest_age_seconds{origin="DOMAIN_CHARGES"}`); !ok || age < 0 || age > 60 {
		t.Errorf("oldest pending charges bundle %v s old (%v), want a fresh one", age, ok)
	}
	if v, ok := scrape(t, tel, `messagehub_backlog_notifications{origin="DOMAIN_TIME_SERIES"}`); !ok || v != 0 {
		t.Errorf("time series backlog %v (%v), want 0", v, ok)
	}
	if v, ok := scrape(t, tel, `messagehub_backlog_recipients`); !ok || v != 2 {
		t.Errorf("recipients with a backlog %v (%v), want 2", v, ok)
	}
	if _, ok := scrape(t, tel, "messagehub_outbox_notices"); ok {
		t.Error("the outbox gauges are shown without an outbox")
	}
	age, ok := scrape(t, tel, `messagehub_backlog_oldest_age_seconds{origin="DOMAIN_CHARGES"}`)
	if !ok || age < 0 || age > 60 {
		t.Errorf("oldest charge %v s old (%v), want a fresh one", age, ok)
	}
}

func TestProviderCallsAreExposedUnderTheirDocumentedNames(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), "test", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	tel.Metrics.RecordProviderCall(context.Background(), "DOMAIN_CHARGES", "ok", 20*time.Millisecond, 1234)
	for _, delta := range []int64{1, 1, -1} {
		tel.Metrics.RecordBuildBackoff(context.Background(), delta)
		tel.Metrics.RecordNoticesHeld(context.Background(), "DOMAIN_CHARGES", "refused", delta)
	}
	for series, want := range map[string]float64{
		`messagehub_content_builds_backoff`:                                             1,
		`messagehub_content_notices_held{origin="DOMAIN_CHARGES",reason="refused"}`:     1,
		`messagehub_content_provider_calls_total{origin="DOMAIN_CHARGES",outcome="ok"}`: 1,
		`messagehub_content_stored_bytes_total{origin="DOMAIN_CHARGES"}`:                1234,
		`messagehub_content_provider_duration_seconds_count{origin="DOMAIN_CHARGES"}`:   1,
	} {
		if v, ok := scrape(t, tel, series); !ok || v != want {
			t.Errorf("%s = %v (%v), want %v", series, v, ok, want)
		}
	}
}

func TestTheOutboxGaugesCountUntoldDequeues(t *testing.T) {
	st, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	repo := hub.New(st, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
	defer func() { repo.Close(); _ = st.Close() }()
	ctx := context.Background()
	recipient := uuid.NewString()
	n := domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges, ContentType: "c", DocumentType: "c", Weight: 1}
	if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
		t.Fatal(err)
	}
	b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v %v", b, err)
	}
	if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
		t.Fatal(err)
	}
	tel, err := telemetry.Setup(ctx, "test", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{}, 10)
	if err := figures.New(st, figures.Options{}).Recount(ctx); err != nil {
		t.Fatal(err)
	}
	stop, err := tel.WatchBacklog(func(ctx context.Context) (store.BacklogFigures, error) {
		defer func() { read <- struct{}{} }()
		return st.ReadFigures(ctx, store.FigureTotals)
	}, time.Hour, true, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	<-read
	stop()
	if v, ok := scrape(t, tel, "messagehub_outbox_notices"); !ok || v != 1 {
		t.Errorf("outbox notices %v (%v), want 1", v, ok)
	}
	if v, ok := scrape(t, tel, "messagehub_outbox_oldest_age_seconds"); !ok || v <= 0 || v > 60 {
		t.Errorf("outbox oldest age %v (%v), want a fresh one", v, ok)
	}
}

func TestNoGaugesBeforeTheFirstRecount(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), "test", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{}, 10)
	stop, err := tel.WatchBacklog(func(context.Context) (store.BacklogFigures, error) {
		defer func() { read <- struct{}{} }()
		return store.BacklogFigures{}, nil // never recounted
	}, time.Hour, true, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	<-read
	stop()
	for _, series := range []string{`messagehub_backlog_recipients`, `messagehub_outbox_notices`, `messagehub_backlog_figures_age_seconds`} {
		if v, ok := scrape(t, tel, series); ok {
			t.Errorf("%s = %v before any recount, want no number", series, v)
		}
	}
}
