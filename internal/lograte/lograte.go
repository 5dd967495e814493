// Package lograte keeps repetitive log lines from flooding the log: a
// Limiter lets through at most a number of lines a second and counts the
// ones it held back, so the next line can say how many there were.
package lograte

import (
	"sync"
	"time"
)

// Limiter allows at most Max events per one-second window. The zero value
// with Max set is ready to use; it is safe for concurrent use.
type Limiter struct {
	Max int

	mu         sync.Mutex
	window     time.Time
	n          int
	suppressed int
}

// Allow says whether an event at now may be logged and, if so, how many
// were held back since the last one allowed.
func (l *Limiter) Allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.window) >= time.Second {
		l.window, l.n = now, 0
	}
	if l.n >= l.Max {
		l.suppressed++
		return false, 0
	}
	l.n++
	suppressed := l.suppressed
	l.suppressed = 0
	return true, suppressed
}
