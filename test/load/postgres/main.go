// Command pgload runs the load tool's two ingest workloads against
// PostgreSQL, as a reference measured on the same machine in the same run
// (run.sh starts a private cluster and runs both this and the hub):
//
//   - save-spread: Saves of -batch notifications spread over -recipients
//     recipients in turn, from -concurrency writers, each Save one
//     multi-row INSERT (one transaction, one durable commit);
//   - save-single: Saves of one notification from -concurrency callers.
//
// The queue table has the columns a notification has, a primary key on the
// id (duplicates are found by it, as the hub does) and an index by
// recipient, cabinet and sequence number (what a peek reads).
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const schema = `
DROP TABLE IF EXISTS queue;
CREATE TABLE queue (
	seq               bigserial,
	id                uuid PRIMARY KEY,
	recipient         uuid NOT NULL,
	origin            smallint NOT NULL,
	content_type      text NOT NULL,
	document_type     text NOT NULL,
	supports_bundling boolean NOT NULL,
	weight            integer NOT NULL
);
CREATE INDEX queue_peek ON queue (recipient, origin, content_type, seq);`

var cabinets = []struct {
	origin      int16
	contentType string
}{{1, "TimeSeries"}, {2, "ChargeLinks"}, {3, "Aggregations"}}

func main() {
	dsn := flag.String("dsn", "", "PostgreSQL connection string (required)")
	scenario := flag.String("scenario", "save-spread", "save-spread or save-single")
	batch := flag.Int("batch", 1000, "save-spread: notifications per Save (1..10000)")
	recipients := flag.Int("recipients", 100, "recipients the notifications are spread over")
	concurrency := flag.Int("concurrency", 0, "writers (default: save-spread 4, save-single 64)")
	duration := flag.Duration("duration", 5*time.Second, "measured time (at most)")
	requests := flag.Int("requests", 0, "stop after this many Saves (0: only -duration)")
	flag.Parse()
	if err := run(*dsn, *scenario, *batch, *recipients, *concurrency, *duration, *requests); err != nil {
		fmt.Fprintln(os.Stderr, "pgload:", err)
		os.Exit(1)
	}
}

func run(dsn, scenario string, batch, nRecipients, concurrency int, duration time.Duration, requests int) error {
	switch {
	case dsn == "":
		return fmt.Errorf("-dsn is required")
	case scenario == "save-single":
		batch = 1
		concurrency = cmpOr(concurrency, 64)
	case scenario == "save-spread":
		concurrency = cmpOr(concurrency, 4)
	default:
		return fmt.Errorf("unknown scenario %q", scenario)
	}
	if batch < 1 || batch > 10_000 || nRecipients < 1 || concurrency > 1000 || duration <= 0 || duration > time.Hour {
		return fmt.Errorf("bad -batch, -recipients, -concurrency or -duration")
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration+time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(concurrency) //nolint:gosec // bounded above
	cfg.MinConns = cfg.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create the queue table: %w", err)
	}
	var syncCommit string
	if err := pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&syncCommit); err != nil {
		return err
	}
	var fsync string
	if err := pool.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil {
		return err
	}
	if syncCommit != "on" || fsync != "on" {
		return fmt.Errorf("not durable: synchronous_commit=%s fsync=%s", syncCommit, fsync)
	}
	rs := make([]string, nRecipients)
	for i := range rs {
		rs[i] = newUUID()
	}
	sql := insertSQL(batch)

	var issued, saved, errCount atomic.Int64
	var firstErr atomic.Value
	samples := make([][]time.Duration, concurrency)
	start := time.Now()
	deadline := start.Add(duration)
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			args := make([]any, 0, batch*7)
			for n := 0; time.Now().Before(deadline) && n < 1<<30; n++ {
				if requests > 0 && issued.Add(1) > int64(requests) {
					return
				}
				args = args[:0]
				first := int(randUint32()) % nRecipients
				for i := range batch {
					c := cabinets[(first+i)%len(cabinets)]
					args = append(args, newUUID(), rs[(first+i)%nRecipients], c.origin, c.contentType, c.contentType+"Document", true, int32(1))
				}
				t0 := time.Now()
				_, err := pool.Exec(ctx, sql, args...)
				d := time.Since(t0)
				if err != nil {
					if errCount.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
					if ctx.Err() != nil {
						return
					}
					continue
				}
				samples[w] = append(samples[w], d)
				saved.Add(int64(batch))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(samples...)
	slices.Sort(all)
	out := map[string]any{
		"scenario": "postgres-" + scenario, "batch": batch, "recipients": nRecipients, "concurrency": concurrency,
		"notifications_per_s": float64(saved.Load()) / elapsed.Seconds(),
		"requests_per_s":      float64(len(all)) / elapsed.Seconds(),
		"latency_p50_ms":      ms(percentile(all, 0.50)),
		"latency_p99_ms":      ms(percentile(all, 0.99)),
		"errors":              errCount.Load(),
	}
	if e, ok := firstErr.Load().(string); ok {
		out["first_error"] = e
	}
	data, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(data))
	if errCount.Load() > 0 {
		return fmt.Errorf("%d errors", errCount.Load())
	}
	return nil
}

// insertSQL is one multi-row INSERT of n notifications.
func insertSQL(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO queue (id, recipient, origin, content_type, document_type, supports_bundling, weight) VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		p := i * 7
		fmt.Fprintf(&b, "($%d,$%d,$%d,$%d,$%d,$%d,$%d)", p+1, p+2, p+3, p+4, p+5, p+6, p+7)
	}
	return b.String()
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func randUint32() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
