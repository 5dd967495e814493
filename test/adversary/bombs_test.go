package adversary

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// zeros is an endless stream of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// A gzip bomb: a Save of about 40 KiB that inflates to 40 MiB of zeros,
// past the 32 MiB message limit. The hub stops inflating a message at 128
// times its compressed size and refuses it with INTERNAL saying to send it
// uncompressed; 32 of them at once would otherwise hold over 1 GiB.
func gzipBomb(t *testing.T) {
	const inflated, conns, perConn = 40 << 20, 4, 8
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	if _, err := io.CopyN(zw, zeros{}, inflated); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	h := startHub(t)
	attackers := make([]*h2, conns)
	for i := range attackers {
		attackers[i] = dialH2(t, h.grpcAddr)
	}
	results := make([][]event, conns)
	gz := []hpack.HeaderField{{Name: "grpc-encoding", Value: "gzip"}}
	measure(t, h, budget, func() {
		var wg sync.WaitGroup
		for i, c := range attackers {
			wg.Go(func() {
				for k := range perConn {
					if err := c.call(uint32(2*k+1), messagehubv1.MessageHub_Save_FullMethodName, gz, bomb.Bytes(), true); err != nil {
						results[i] = append(results[i], event{closed: true, err: err})
						return
					}
				}
				for len(results[i]) < perConn {
					ev := c.next()
					if ev.answered {
						continue // the headers of an answer: its trailers follow
					}
					results[i] = append(results[i], ev)
					if ev.closed || ev.goAway {
						return
					}
				}
			})
		}
		wg.Wait()
	})
	t.Logf("%d Saves of %.1f KiB inflating to %d MiB: %+v", conns*perConn, float64(bomb.Len())/(1<<10), inflated>>20, results[0][0])
	for i, evs := range results {
		for _, ev := range evs {
			if !ev.ended || ev.code != codes.Internal || !strings.Contains(ev.message, "send it uncompressed") {
				t.Errorf("connection %d: %+v; want INTERNAL saying to send it uncompressed", i, ev)
			}
		}
	}
	healthy(t, h)
}

// healthy fails the test unless the hub still answers a health check.
func healthy(t *testing.T, h *hub) {
	t.Helper()
	resp, err := h.health.Check(ctxT(t), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("a health check after the attack: %v %v", resp.GetStatus(), err)
	}
}

// An HPACK bomb: header blocks of a few KiB that refer to one 4 KB field of
// the dynamic table a thousand times, 4 MB each once decoded, on many
// streams. A call's headers may be 16 KiB once decoded: each stream is
// reset (or its connection closed), none is served, and the hub does not
// hold what the blocks decode to (400 of them: 1.6 GB).
func headerBomb(t *testing.T) {
	const conns, perConn, refs = 4, 100, 1000
	h := startHub(t)
	bomb := make([]hpack.HeaderField, refs)
	for i := range bomb {
		bomb[i] = hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 4000)}
	}
	attackers := make([]*h2, conns)
	for i := range attackers {
		attackers[i] = dialH2(t, h.grpcAddr)
		// A call with a small header block is served on the same
		// connection: what follows is refused for its headers alone.
		c := attackers[i]
		if err := c.call(1, "/grpc.health.v1.Health/Check", []hpack.HeaderField{{Name: "x-small", Value: "within the limit"}}, []byte{}, false); err != nil {
			t.Fatal(err)
		}
		for ev := c.next(); !ev.ended || ev.stream != 1 || ev.code != codes.OK; ev = c.next() {
			if !ev.answered {
				t.Fatalf("a health check with small headers: %+v", ev)
			}
		}
	}
	type result struct {
		reset, cut int
		served     []event
	}
	results := make([]result, conns)
	measure(t, h, budget, func() {
		var wg sync.WaitGroup
		for i, c := range attackers {
			wg.Go(func() {
				r := &results[i]
				sent := 0
				for k := range perConn {
					// Without a message the headers end the stream: a
					// call the hub accepted would be answered at once.
					if err := c.call(uint32(2*k+3), "/grpc.health.v1.Health/Check", bomb, nil, false); err != nil {
						break
					}
					sent++
				}
				for r.reset+len(r.served) < sent {
					ev := c.next()
					switch {
					case ev.isReset:
						r.reset++
					case ev.closed || ev.goAway:
						r.cut = sent - r.reset - len(r.served)
						return
					default:
						r.served = append(r.served, ev)
					}
				}
				r.cut += perConn - sent
			})
		}
		wg.Wait()
	})
	reset, cut := 0, 0
	for i, r := range results {
		reset += r.reset
		cut += r.cut
		if len(r.served) > 0 {
			t.Errorf("connection %d: %d header bombs served (%+v), want each refused", i, len(r.served), r.served[0])
		}
	}
	t.Logf("%d header blocks decoding to %d MB each: %d streams reset, %d cut with their connection",
		conns*perConn, refs*4038/1_000_000, reset, cut)
	if reset+cut != conns*perConn {
		t.Errorf("%d reset and %d cut of %d", reset, cut, conns*perConn)
	}
	healthy(t, h)
}
