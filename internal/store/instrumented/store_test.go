package instrumented_test

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/instrumented"
	"github.com/energydatahub/messagehub/internal/store/pebble"
	"github.com/energydatahub/messagehub/internal/telemetry"
)

func openEmbedded(t *testing.T) store.Store {
	t.Helper()
	s, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// reader collects what the instrumented store recorded.
type reader struct {
	t *testing.T
	r *sdkmetric.ManualReader
}

func newMetrics(t *testing.T) (*telemetry.Metrics, reader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	m, err := telemetry.NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)))
	if err != nil {
		t.Fatal(err)
	}
	return m, reader{t, r}
}

func (r reader) collect() map[string]metricdata.Aggregation {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.r.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sum adds up a counter's points whose attributes include every one of want.
func sum(data metricdata.Aggregation, want ...attribute.KeyValue) int64 {
	s, ok := data.(metricdata.Sum[int64])
	if !ok {
		return 0
	}
	var total int64
	for _, p := range s.DataPoints {
		if hasAll(p.Attributes, want) {
			total += p.Value
		}
	}
	return total
}

func histCount(data metricdata.Aggregation, want ...attribute.KeyValue) (count uint64, total float64) {
	switch h := data.(type) {
	case metricdata.Histogram[int64]:
		for _, p := range h.DataPoints {
			if hasAll(p.Attributes, want) {
				count += p.Count
				total += float64(p.Sum)
			}
		}
	case metricdata.Histogram[float64]:
		for _, p := range h.DataPoints {
			if hasAll(p.Attributes, want) {
				count += p.Count
				total += p.Sum
			}
		}
	}
	return count, total
}

func hasAll(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func TestTheDecoratorRecordsOperationsBundlesAndDequeues(t *testing.T) {
	m, r := newMetrics(t)
	store := instrumented.New(openEmbedded(t), m)
	repo := hub.New(store, hub.Options{SweepInterval: time.Hour}, slog.New(slog.DiscardHandler))
	t.Cleanup(func() {
		repo.Close()
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	recipient := uuid.NewString()
	ns := make([]domain.Notification, 5)
	for i := range ns {
		ns[i] = domain.Notification{
			ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginTimeSeries,
			ContentType: "TimeSeries", DocumentType: "TimeSeries", SupportsBundling: true, Weight: 3,
		}
	}
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("Peek = %v, %v", b, err)
	}
	// A re-peek returns the pending bundle: not a new one.
	if _, err := repo.Peek(ctx, recipient, domain.GroupAll, ""); err != nil {
		t.Fatal(err)
	}
	if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := repo.Dequeue(ctx, recipient, b.ID); err == nil {
		t.Fatal("a second Dequeue of one bundle succeeded")
	}

	got := r.collect()
	tests := []struct {
		name      string
		got, want int64
	}{
		{"one new bundle", sum(got["messagehub.bundles.peeked"]), 1},
		{"one dequeued bundle", sum(got["messagehub.bundles.dequeued"]), 1},
		{"five dequeued notifications", sum(got["messagehub.notifications.dequeued"]), 5},
		{"no errors on a clean run", sum(got["messagehub.store.operation.errors"]), 0},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, tt.got, tt.want)
		}
	}
	if n, total := histCount(got["messagehub.bundle.notifications"]); n != 1 || total != 5 {
		t.Errorf("bundle size histogram: %d bundles of %v notifications, want 1 of 5", n, total)
	}
	if n, total := histCount(got["messagehub.bundle.weight"]); n != 1 || total != 15 {
		t.Errorf("bundle weight histogram: %d bundles weighing %v, want 1 weighing 15", n, total)
	}
	for _, op := range []string{instrumented.OpCommitSaves, instrumented.OpLoadRecipient, instrumented.OpCreateBundle, instrumented.OpAcknowledge} {
		if n, _ := histCount(got["messagehub.store.operation.duration"], attribute.String("operation", op)); n == 0 {
			t.Errorf("no duration recorded for %s", op)
		}
	}
}

// failingStore injects a failure into Acknowledge of a real store (fault
// injection as a decorator, like the one under test).
type failingStore struct {
	store.Store
	err error
}

func (f failingStore) Acknowledge(context.Context, string, bundleRecord, cursor) error { return f.err }

func TestErrorsAreCountedByOperationAndKind(t *testing.T) {
	m, r := newMetrics(t)
	store := instrumented.New(failingStore{Store: openEmbedded(t), err: fmt.Errorf("etag: %w", store.ErrConflict)}, m)
	t.Cleanup(func() { _ = store.Close() })
	err := store.Acknowledge(context.Background(), uuid.NewString(), bundleRecord{Count: 7}, cursor{})
	if err == nil {
		t.Fatal("the failure was swallowed")
	}
	got := r.collect()
	if n := sum(got["messagehub.store.operation.errors"], attribute.String("operation", "acknowledge"), attribute.String("error", "conflict")); n != 1 {
		t.Errorf("conflicts on acknowledge = %d, want 1", n)
	}
	if n := sum(got["messagehub.notifications.dequeued"]); n != 0 {
		t.Errorf("a failed acknowledge counted %d dequeued notifications", n)
	}
}

func TestErrorKind(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("x: %w", store.ErrConflict), "conflict"},
		{fmt.Errorf("x: %w", store.ErrNotHolder), "not_holder"},
		{fmt.Errorf("x: %w", domain.ErrUnavailable), "unavailable"},
		{context.Canceled, "canceled"},
		{context.DeadlineExceeded, "deadline_exceeded"},
		{domain.ErrNotFound, "not_found"},
		{fmt.Errorf("disk full"), "other"},
	}
	for _, tt := range tests {
		if got := instrumented.ErrorKind(tt.err); got != tt.want {
			t.Errorf("ErrorKind(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

type (
	bundleRecord = bundle.Record
	cursor       = catalog.Cursor
)

// Every method of the store contract reaches the store behind the
// decorator: none answers in its place (as a dropped capability would).
// The store behind is nil, so a call that reaches it panics there.
func TestTheDecoratorForwardsEveryMethodOfTheContract(t *testing.T) {
	contract := reflect.TypeFor[store.Store]()
	decorated := reflect.ValueOf(instrumented.New(struct{ store.Store }{}, telemetry.Discard()))
	ctxType := reflect.TypeFor[context.Context]()
	for i := range contract.NumMethod() {
		name := contract.Method(i).Name
		method := decorated.MethodByName(name)
		args := make([]reflect.Value, method.Type().NumIn())
		for j := range args {
			if in := method.Type().In(j); in == ctxType {
				args[j] = reflect.ValueOf(context.Background())
			} else {
				args[j] = reflect.Zero(in)
			}
		}
		if !reachesTheStoreBehind(method, args) {
			t.Errorf("%s is answered by the decorator without the store behind it", name)
		}
	}
}

// reachesTheStoreBehind calls method with args (a variadic method's last
// one its whole slice) and reports whether it reached the nil store behind:
// a nil dereference, not any other panic (such as reflect's own for a call
// it cannot make).
func reachesTheStoreBehind(method reflect.Value, args []reflect.Value) (reached bool) {
	defer func() {
		_, reached = recover().(runtime.Error)
	}()
	if method.Type().IsVariadic() {
		method.CallSlice(args)
	} else {
		method.Call(args)
	}
	return false
}
