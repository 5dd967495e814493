package server

import (
	"context"

	"google.golang.org/grpc/stats"
)

// handlerStack is the stack a call's goroutine is given before it reads
// its request. gRPC runs every call on a new goroutine, which starts with
// the runtime's starting stack (4 KiB under save-single: the average of all
// goroutines' stacks); reading the request alone (gRPC's frames, ~3.5 KiB)
// overflows that, and the runtime copied the stack with 16 frames on it to
// adjust: ~9% of the hub's CPU in the profile, the largest single cost of
// the gRPC path. Growing the stack at once, when the goroutine holds a few
// frames, costs a fraction of that; 8 KiB in all is what a call's path
// through the service and the repository needs (no later growth showed in
// the profile), so a bigger call still grows as it would have.
const handlerStack = 4 << 10

// growStack makes the runtime grow the goroutine's stack now (to hold a
// frame of handlerStack bytes where the caller is) rather than deep in the
// call, where copying it costs more.
//
//go:noinline
func growStack(i int) byte {
	var pad [handlerStack]byte
	return pad[i%len(pad)]
}

// earlyStack is a stats handler whose TagRPC, called on a call's goroutine
// before anything else of the call, grows the stack first (see
// handlerStack); everything else is h's.
type earlyStack struct{ stats.Handler }

func (h earlyStack) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	growStack(len(info.FullMethodName))
	return h.Handler.TagRPC(ctx, info)
}
