package app_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/app"
)

// Durations are logged as text ("1.5s"), in groups too, not as nanoseconds.
func TestTheLoggerWritesDurationsAsText(t *testing.T) {
	var out bytes.Buffer
	logger := app.NewLogger(&out, slog.LevelInfo)
	logger.Info("took", "duration", 1500*time.Millisecond, slog.Group("retry", "in", 250*time.Microsecond))
	for _, want := range []string{`"duration":"1.5s"`, `"retry":{"in":"250µs"}`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("%s lacks %s", out.String(), want)
		}
	}
	if logger.Enabled(t.Context(), slog.LevelDebug) {
		t.Error("a logger at info is enabled at debug")
	}
}
