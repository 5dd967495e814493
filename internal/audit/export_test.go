package audit

import "time"

// SetAfter makes the Log started with o wait for its timers on after
// instead of the clock: a test fires them.
func SetAfter(o *Options, after func(time.Duration) <-chan time.Time) { o.after = after }
