package lograte

import (
	"testing"
	"time"
)

func TestLimiterCountsWhatItHeldBack(t *testing.T) {
	l := Limiter{Max: 2}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var allowed int
	for i := range 5 {
		if ok, _ := l.Allow(start.Add(time.Duration(i) * time.Millisecond)); ok {
			allowed++
		}
	}
	ok, suppressed := l.Allow(start.Add(1500 * time.Millisecond))
	if allowed != 2 || !ok || suppressed != 3 {
		t.Fatalf("allowed %d in the first second, then %v with %d held back; want 2, then true with 3", allowed, ok, suppressed)
	}
}
