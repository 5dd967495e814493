package pebble_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// Pebble's informational lines are below debug, with component=pebble: a
// hub at debug shows its own lines only; one at PebbleInfoLevel shows
// pebble's too.
func TestPebblesOwnLinesAreBelowDebug(t *testing.T) {
	for _, tc := range []struct {
		level      slog.Level
		wantPebble bool
	}{{slog.LevelDebug, false}, {pebble.PebbleInfoLevel, true}} {
		var out bytes.Buffer
		s, err := pebble.Open(t.TempDir(), slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: tc.level})))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), `"component":"pebble"`); got != tc.wantPebble {
			t.Errorf("at %v, pebble's lines shown: %v, want %v:\n%s", tc.level, got, tc.wantPebble, out.String())
		}
	}
}
