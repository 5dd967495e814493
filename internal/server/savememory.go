package server

import (
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/lograte"
)

// DefaultMaxSaveMemory bounds the Save requests a server holds at once
// (Limits.MaxSaveMemory), as the HTTP gateway's default bounds its request
// bodies: about 17 of the largest Saves (7.3 MB each, counted as saveBudget
// counts), thousands of ordinary ones.
const DefaultMaxSaveMemory = 128 << 20

// decodedNotificationBytes is what a notification of a Save costs once
// decoded beyond its bytes on the wire: its message and the hub's copy of
// it (about 120 bytes each, measured on a Save of 10,000 of the smallest).
const decodedNotificationBytes = 128

// saveBudget bounds the memory of the Save requests a server holds at
// once. gRPC has read a request's bytes before any interceptor runs, but
// decoding it and queueing it for the hub's group commit are what keep it:
// a Save takes its weight after its bytes are read and counted, before it
// is decoded, and gives it back when its call returns. A Save that does
// not fit is answered UNAVAILABLE (which clients retry, as the HTTP
// gateway's 503 for too many bodies) and its bytes are released
// undecoded. The refusals are logged at warn, at most
// saveRefusalsPerSecond a second: the call's own UNAVAILABLE line is
// debug, as a routine answer's.
type saveBudget struct {
	held   *semaphore.Weighted
	size   int64
	logger *slog.Logger
	lines  lograte.Limiter
}

// saveRefusalsPerSecond bounds the log lines of refused Saves: clients
// retrying in a loop must not flood the log.
const saveRefusalsPerSecond = 1

func newSaveBudget(size int64, logger *slog.Logger) *saveBudget {
	return &saveBudget{held: semaphore.NewWeighted(size), size: size, logger: logger, lines: lograte.Limiter{Max: saveRefusalsPerSecond}}
}

// take counts a Save of wire bytes and notifications against the budget
// and returns what gives it back. A Save heavier than the whole budget
// takes all of it, so that it passes when nothing else is held.
func (b *saveBudget) take(wire, notifications int) (release func(), err error) {
	weight := min(int64(wire)+int64(notifications)*decodedNotificationBytes, b.size)
	if !b.held.TryAcquire(weight) {
		if ok, suppressed := b.lines.Allow(time.Now()); ok {
			b.logger.Warn("Save refused: the Saves held take all the memory allowed them; clients retry",
				"limit_bytes", b.size, "request_bytes", weight, "suppressed_since_last", suppressed)
		}
		return nil, routine{fmt.Errorf("%w: the hub holds as many Saves as its memory for them allows (%s); nothing of this one was stored: try again shortly",
			domain.ErrUnavailable, diskguard.FormatSize(uint64(b.size)))}
	}
	return func() { b.held.Release(weight) }, nil
}
