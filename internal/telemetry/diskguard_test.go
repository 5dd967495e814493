package telemetry_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/telemetry"
)

// The disk guard's gauges follow its looks at the volume: its level, the
// free space it counts on and the reserve it keeps.
func TestTheDiskGuardGaugesFollowItsLooks(t *testing.T) {
	const reserve = 1 << 20
	var free atomic.Uint64
	free.Store(8 << 20)
	g := diskguard.New(t.TempDir(), reserve, func(string) (uint64, error) { return free.Load(), nil }, time.Hour, slog.New(slog.DiscardHandler))
	defer g.Close()
	tel, err := telemetry.Setup(context.Background(), "test", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.WatchDiskGuard(g); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		free  uint64
		level float64
	}{{8 << 20, 0}, {reserve - 1, 1}, {reserve/2 - 1, 2}, {8 << 20, 0}} {
		free.Store(tc.free)
		g.Refresh()
		for series, want := range map[string]float64{
			"messagehub_disk_guard_level":    tc.level,
			"messagehub_disk_free_bytes":     float64(tc.free),
			"messagehub_disk_min_free_bytes": reserve,
		} {
			if v, ok := scrape(t, tel, series); !ok || v != want {
				t.Errorf("with %d bytes free: %s = %v (%v), want %v", tc.free, series, v, ok, want)
			}
		}
	}
}
