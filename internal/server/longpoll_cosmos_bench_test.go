package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// BenchmarkIdleActorsOnCosmos measures what 1,000 idle actors cost a hub on
// Cosmos DB (the test server, with its replica lag) per minute, in real
// time: plain Peeks every 5 s, and Peeks waiting 20 s while the hub follows
// the other instances' bells. It reports every HTTP request the store sent
// (the bells' polls included) and the Peek calls, per minute; the figures
// are in docs/performance.md.
//
//	go test -run '^$' -bench IdleActorsOnCosmos -benchtime 1x -timeout 20m ./internal/server/
func BenchmarkIdleActorsOnCosmos(b *testing.B) {
	srv := cosmostest.Start(b)
	for _, c := range []struct {
		name       string
		poll, wait time.Duration
	}{
		{"polling_every_5s", 5 * time.Second, 0},
		{"waiting_20s", 0, 20 * time.Second},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				st, err := cosmos.Open(context.Background(), cosmos.Config{
					Endpoint: srv.Endpoint, Key: srv.Key, Database: cosmostest.UniqueID("idle"), Provision: true,
					// Unthrottled: a 429's retry would count as a request.
					Throughput: "manual=1000000", Transport: cosmostest.NewHTTPClient(),
				})
				if err != nil {
					b.Fatal(err)
				}
				h := hub.New(st, hub.Options{MaxWaiters: 2 * idleActors}, nil)
				requests := func() int64 {
					var n int64
					for _, s := range st.Meter().Snapshot() {
						n += s.Requests
					}
					return n
				}
				before := st.Meter().Snapshot()
				stored, peeks := idleActorsFor(b, NewService(h), c.poll, c.wait, 1, requests)
				after := st.Meter().Snapshot()
				h.Close()
				_ = st.Close()
				b.ReportMetric(float64(stored), "store_requests/min")
				b.ReportMetric(float64(peeks), "peek_calls/min")
				fmt.Printf("cosmos %-16s %d idle actors: %6d store requests/min, %6d Peek calls/min; over the run by operation:", c.name, idleActors, stored, peeks)
				for _, op := range slices.Sorted(maps.Keys(after)) {
					fmt.Printf(" %s=%d", op, after[op].Requests-before[op].Requests)
				}
				fmt.Println()
			}
		})
	}
}
