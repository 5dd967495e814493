package server

import (
	"fmt"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/energydatahub/messagehub/internal/diskguard"
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
// undecoded.
type saveBudget struct {
	held *semaphore.Weighted
	size int64
}

func newSaveBudget(size int64) *saveBudget {
	return &saveBudget{held: semaphore.NewWeighted(size), size: size}
}

// take counts a Save of wire bytes and notifications against the budget
// and returns what gives it back. A Save heavier than the whole budget
// takes all of it, so that it passes when nothing else is held.
func (b *saveBudget) take(wire, notifications int) (release func(), err error) {
	weight := min(int64(wire)+int64(notifications)*decodedNotificationBytes, b.size)
	if !b.held.TryAcquire(weight) {
		return nil, status.Error(codes.Unavailable, fmt.Sprintf(
			"the hub holds as many Saves as its memory for them allows (%s); nothing of this one was stored: try again shortly",
			diskguard.FormatSize(uint64(b.size))))
	}
	return func() { b.held.Release(weight) }, nil
}
