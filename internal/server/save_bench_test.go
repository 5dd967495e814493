package server

import (
	"context"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/telemetry"
)

// savingHub saves everything at once, without a store: what is left is the
// cost of the gRPC path.
type savingHub struct{ recordingHub }

func (*savingHub) Save(_ context.Context, ns []domain.Notification) (domain.SaveResult, error) {
	return domain.SaveResult{Saved: len(ns)}, nil
}

// BenchmarkSaveOneOverLoopback: Saves of one notification from 64 callers
// over a TCP loopback connection to a server set up as the hub sets it up
// (telemetry, access log at info) over a hub without a store. Client and
// server share the process; cpu-µs/op is the CPU time of both per Save.
func BenchmarkSaveOneOverLoopback(b *testing.B) {
	tel, err := telemetry.Setup(context.Background(), "bench", func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(discardWriter{}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, _ := NewGRPCServer(&savingHub{}, logger, WithMetrics(tel.Metrics), WithStatsHandler(tel.GRPCServerHandler()))
	client := overLoopback(b, srv)
	var n atomic.Int64
	b.SetParallelism(64)
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(n.Add(1))
			_, err := client.Save(context.Background(), &messagehubv1.SaveRequest{
				Notifications: []*messagehubv1.DataAvailable{validNotification(i)},
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// cpuTime is the CPU time (user and system) of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
