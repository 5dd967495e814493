package pebble_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// The benchmarks drive the repository over a real store in a temp dir, as
// the service does, without the gRPC layer. Throughputs are reported as
// metrics; run them with -benchtime Nx and -count 3 (see docs/performance.md).

func openRepo(b *testing.B, opts hub.Options) *hub.Hub {
	b.Helper()
	store, err := pebble.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	repo := hub.New(store, opts, nil)
	b.Cleanup(func() {
		repo.Close()
		_ = store.Close()
	})
	return repo
}

func batch(n int, recipient string, weight int64) []domain.Notification {
	out := make([]domain.Notification, n)
	for i := range out {
		out[i] = domain.Notification{
			ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginTimeSeries,
			ContentType: "rsm-014", DocumentType: "rsm-014", SupportsBundling: true, Weight: weight,
		}
	}
	return out
}

// saveAll saves batches from `workers` goroutines and fails on any error.
func saveAll(b *testing.B, repo *hub.Hub, workers int, batches [][]domain.Notification) {
	b.Helper()
	var wg sync.WaitGroup
	next := make(chan []domain.Notification)
	for range workers {
		wg.Go(func() {
			for ns := range next {
				if _, err := repo.Save(context.Background(), ns); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for _, ns := range batches {
		next <- ns
	}
	close(next)
	wg.Wait()
}

// BenchmarkSaveBatch1000: Saves of 1,000 notifications from 4 clients, spread
// over 8 recipients.
func BenchmarkSaveBatch1000(b *testing.B) {
	repo := openRepo(b, hub.Options{})
	recipients := make([]string, 8)
	for i := range recipients {
		recipients[i] = uuid.NewString()
	}
	batches := make([][]domain.Notification, b.N)
	for i := range batches {
		batches[i] = batch(1000, recipients[i%len(recipients)], 1)
	}
	b.ResetTimer()
	saveAll(b, repo, 4, batches)
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "notifications/s")
}

// BenchmarkSaveSingleConcurrent64: Saves of one notification from 64 clients;
// group commit lets them share durable writes.
func BenchmarkSaveSingleConcurrent64(b *testing.B) {
	repo := openRepo(b, hub.Options{})
	recipients := make([]string, 64)
	for i := range recipients {
		recipients[i] = uuid.NewString()
	}
	batches := make([][]domain.Notification, b.N)
	for i := range batches {
		batches[i] = batch(1, recipients[i%len(recipients)], 1)
	}
	b.ResetTimer()
	saveAll(b, repo, 64, batches)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "saves/s")
}

// BenchmarkDrain1000: peek + dequeue of 1,000-notification bundles by 4
// recipients draining in parallel. b.N is the number of bundles.
func BenchmarkDrain1000(b *testing.B) {
	repo := openRepo(b, hub.Options{MaxBundleWeight: 1000})
	recipients := make([]string, 4)
	var batches [][]domain.Notification
	for i := range recipients {
		recipients[i] = uuid.NewString()
		for range (b.N + 3) / 4 {
			batches = append(batches, batch(1000, recipients[i], 1))
		}
	}
	saveAll(b, repo, 4, batches)
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, r := range recipients {
		wg.Go(func() {
			for {
				bun, err := repo.Peek(context.Background(), r, domain.GroupAll, "")
				if err != nil || bun == nil {
					if err != nil {
						b.Error(err)
					}
					return
				}
				if len(bun.NotificationIDs) != 1000 {
					b.Errorf("bundle of %d", len(bun.NotificationIDs))
				}
				if err := repo.Dequeue(context.Background(), r, bun.ID); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(len(batches)*1000)/b.Elapsed().Seconds(), "notifications/s")
}

// BenchmarkPeekFullBundle: the time to cut and return a bundle of 51,200
// notifications (weight 1) spread over six drawers. Each iteration's dequeue
// is not timed.
func BenchmarkPeekFullBundle(b *testing.B) {
	repo := openRepo(b, hub.Options{})
	r := uuid.NewString()
	var batches [][]domain.Notification
	for range (b.N*domain.DefaultMaxBundleWeight)/10_000 + 1 {
		batches = append(batches, batch(10_000, r, 1))
	}
	saveAll(b, repo, 1, batches)
	b.ResetTimer()
	for range b.N {
		bun, err := repo.Peek(context.Background(), r, domain.GroupAll, "")
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if len(bun.NotificationIDs) != domain.DefaultMaxBundleWeight {
			b.Fatalf("bundle of %d", len(bun.NotificationIDs))
		}
		if err := repo.Dequeue(context.Background(), r, bun.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkDequeue: the latency of a dequeue of a peeked 100-notification
// bundle, one at a time; reports p50 and p99. Peeks are not timed.
func BenchmarkDequeue(b *testing.B) {
	repo := openRepo(b, hub.Options{MaxBundleWeight: 100})
	r := uuid.NewString()
	var batches [][]domain.Notification
	for range b.N/100 + 1 {
		batches = append(batches, batch(10_000, r, 1))
	}
	saveAll(b, repo, 1, batches)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		bun, err := repo.Peek(context.Background(), r, domain.GroupAll, "")
		if err != nil || bun == nil {
			b.Fatal("peek", err)
		}
		b.StartTimer()
		start := time.Now()
		if err := repo.Dequeue(context.Background(), r, bun.ID); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkSaveBatch1000Over100Recipients: the users' shape. A domain
// publishes for many actors at once: every Save of 1,000 holds 10
// notifications for each of 100 recipients; 4 writers.
func BenchmarkSaveBatch1000Over100Recipients(b *testing.B) {
	repo := openRepo(b, hub.Options{})
	recipients := make([]string, 100)
	for i := range recipients {
		recipients[i] = uuid.NewString()
	}
	batches := make([][]domain.Notification, b.N)
	for i := range batches {
		for _, r := range recipients {
			batches[i] = append(batches[i], batch(10, r, 1)...)
		}
	}
	b.ResetTimer()
	saveAll(b, repo, 4, batches)
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "notifications/s")
}

// BenchmarkSaveToALargeCabinet: Saves of 1 notification, one after another,
// to a recipient whose cabinet already holds `drawers` full drawers
// (10,000 undelivered notifications each): the cost of a save must not grow
// with the backlog it joins.
func BenchmarkSaveToALargeCabinet(b *testing.B) {
	for _, drawers := range []int{1, 100, 400} {
		b.Run(fmt.Sprintf("drawers=%d", drawers), func(b *testing.B) {
			repo := openRepo(b, hub.Options{})
			r := uuid.NewString()
			fill := make([][]domain.Notification, drawers)
			for i := range fill {
				fill[i] = batch(10_000, r, 1)
			}
			saveAll(b, repo, 2, fill)
			saves := make([][]domain.Notification, b.N)
			for i := range saves {
				saves[i] = batch(1, r, 1)
			}
			b.ResetTimer()
			saveAll(b, repo, 1, saves)
		})
	}
}
