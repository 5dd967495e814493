package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Answers a client does not read stay in the server until they are written:
// gRPC queues a unary call's whole answer (a Peek of 15 MB) and a stream's
// message (a PeekContent's 1 MiB) for as long as the client keeps its
// flow-control window shut, so 100 unread Peeks on one connection held 1.35
// GB. The bytes of answers encoded and not yet written are therefore
// budgeted, per connection and for the server: a MessageHub answer takes its
// encoded size from both before it is encoded, and gives it back when gRPC
// has written it (or dropped it with its stream or connection). An answer
// that finds no room within AnswerBudget.Wait is refused with RESOURCE_EXHAUSTED.

// AnswerBudget bounds the bytes of answers encoded and not yet written.
type AnswerBudget struct {
	// PerConnection is what one connection's answers may hold.
	PerConnection int64
	// Total is what all connections' answers together may hold.
	Total int64
	// Wait is how long an answer waits for room before it is refused:
	// the client's earlier answers are being written meanwhile, if it
	// reads them.
	Wait time.Duration
}

// DefaultAnswerBudget lets a connection hold four of the largest bundles
// (about 16 MiB each) and the server 320 MiB, so that no abuse of unread
// answers makes the hub hold more than its stated memory budget (README).
var DefaultAnswerBudget = AnswerBudget{PerConnection: 64 << 20, Total: 320 << 20, Wait: 5 * time.Second}

// smallAnswer is the size below which answers are not counted: most
// answers, and the room a buffer must have for gRPC to pool it, which the
// release hook relies on (mem.NewBuffer).
const smallAnswer = 64 << 10

// WithAnswerBudget replaces DefaultAnswerBudget; zero fields keep their
// defaults.
func WithAnswerBudget(b AnswerBudget) Option {
	return func(o *options) {
		setPositive(&o.answers.PerConnection, b.PerConnection)
		setPositive(&o.answers.Total, b.Total)
		setPositive(&o.answers.Wait, b.Wait)
	}
}

// answerBudgets is a stats handler that gives each connection its budget,
// in the context its calls derive from.
type answerBudgets struct {
	perConn int64
	total   *semaphore.Weighted
	wait    time.Duration
}

type connAnswersKey struct{}

// connAnswers is one connection's budget. What its answers hold of the
// server's total is given back when the connection ends, whatever gRPC did
// with their buffers.
type connAnswers struct {
	own   *semaphore.Weighted
	total *semaphore.Weighted
	wait  time.Duration

	mu     sync.Mutex
	held   int64 // of total
	closed bool
}

func (b answerBudgets) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connAnswersKey{}, &connAnswers{own: semaphore.NewWeighted(b.perConn), total: b.total, wait: b.wait})
}

func (b answerBudgets) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnEnd); !ok {
		return
	}
	if c, ok := ctx.Value(connAnswersKey{}).(*connAnswers); ok {
		c.mu.Lock()
		c.closed = true
		c.total.Release(c.held)
		c.held = 0
		c.mu.Unlock()
	}
}

func (answerBudgets) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (answerBudgets) HandleRPC(context.Context, stats.RPCStats)                       {}

// reserve takes n bytes of the call's connection and of the server, waiting
// at most the budget's Wait, and returns what gives them back (once). Without a
// budget in ctx (a server without one) it takes nothing.
func reserve(ctx context.Context, n int64) (func(), error) {
	c, ok := ctx.Value(connAnswersKey{}).(*connAnswers)
	if !ok || n < smallAnswer {
		return func() {}, nil
	}
	wctx, cancel := context.WithTimeout(ctx, c.wait)
	defer cancel()
	if err := c.own.Acquire(wctx, n); err != nil {
		return nil, refused(ctx, n, "this connection", c.wait)
	}
	if err := c.total.Acquire(wctx, n); err != nil {
		c.own.Release(n)
		return nil, refused(ctx, n, "the server", c.wait)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.total.Release(n)
		c.own.Release(n)
		return nil, status.Error(codes.Canceled, "the connection closed")
	}
	c.held += n
	c.mu.Unlock()
	return sync.OnceFunc(func() {
		c.own.Release(n)
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.closed {
			c.held -= n
			c.total.Release(n)
		}
	}), nil
}

func refused(ctx context.Context, n int64, whose string, waited time.Duration) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.ResourceExhausted, fmt.Sprintf(
		"answers not yet read by the client hold all the room of %s; an answer of %d bytes waited %s: read the answers of earlier calls first",
		whose, n, waited))
}

// heldAnswer is an answer that holds budget until gRPC has written it: the
// server's codec encodes msg into a buffer whose release gives it back.
type heldAnswer struct {
	msg     any
	release func()
}

// marshalHeld encodes h.msg with inner into one buffer that calls h.release
// when gRPC frees it (written, or dropped with its stream).
func marshalHeld(inner encoding.CodecV2, h *heldAnswer) (mem.BufferSlice, error) {
	var b []byte
	if m, ok := h.msg.(interface{ MarshalVT() ([]byte, error) }); ok {
		var err error
		if b, err = m.MarshalVT(); err != nil {
			h.release()
			return nil, err
		}
	} else {
		data, err := inner.Marshal(h.msg)
		if err != nil {
			h.release()
			return nil, err
		}
		b = data.Materialize()
		data.Free()
	}
	if len(b) < smallAnswer {
		h.release()
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return mem.BufferSlice{mem.NewBuffer(&b, releasingPool{h.release})}, nil
}

// releasingPool is the "pool" of one buffer: putting it back is the
// answer's release.
type releasingPool struct{ release func() }

func (p releasingPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p releasingPool) Put(*[]byte)       { p.release() }

// holdAnswer makes a unary call's answer hold its encoded size of the
// budget until it is written. It comes after the interceptors (which see
// the answer itself); a refusal is a status of its own.
func holdAnswer(ctx context.Context, resp any) (any, error) {
	m, ok := resp.(proto.Message)
	if !ok {
		return resp, nil
	}
	release, err := reserve(ctx, int64(proto.Size(m)))
	if err != nil {
		return nil, err
	}
	return &heldAnswer{msg: resp, release: release}, nil
}
