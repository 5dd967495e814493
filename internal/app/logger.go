package app

import (
	"io"
	"log/slog"
)

// NewLogger is the hub's logger: JSON lines to w at level and above. A
// duration is written as Go writes it ("1.5s", "250µs"), as every line
// that says how long something took does, rather than the JSON handler's
// raw nanoseconds.
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsText}))
}

func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
