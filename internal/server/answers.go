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

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// Answers a client does not read stay in the server until they are written:
// gRPC queues a unary call's whole answer (a Peek of 15 MB) and a stream's
// message (a PeekContent's 1 MiB) for as long as the client keeps its
// flow-control window shut, so 100 unread Peeks on one connection held 1.35
// GB. The bytes of answers encoded and not yet written are therefore
// budgeted, per connection, per actor and for the server: a MessageHub
// answer takes its encoded size from each before it is encoded, and gives it
// back when gRPC has written it (or dropped it with its stream or
// connection). An answer that finds no room within AnswerBudget.Wait is
// refused with RESOURCE_EXHAUSTED.
//
// An answer waiting for room holds what it answers meanwhile (a Peek's
// bundle as the store read it, each call its own), so the answers waiting
// are bounded too: at most AnswerBudget.Waiting bytes of them wait at once
// in the server, and one that finds no room at once and none to wait in is
// refused at once.

// AnswerBudget bounds the bytes of answers encoded and not yet written.
type AnswerBudget struct {
	// PerConnection is what one connection's answers may hold.
	PerConnection int64
	// Total is what all connections' answers together may hold.
	Total int64
	// Waiting is what the answers waiting for room may hold, in all.
	Waiting int64
	// Wait is how long an answer waits for room before it is refused:
	// the client's earlier answers are being written meanwhile, if it
	// reads them.
	Wait time.Duration
}

// ActorShare is the most of a budget of answers being written (the bytes of
// the server's AnswerBudget.Total, the gateway's places of documents) that
// one actor's answers may hold, on all its connections together: a quarter,
// so that no actor, however many connections it opens, holds what the
// others need. An actor is the recipient its answers deliver to: with
// authentication the caller itself (it may peek only its own bundles),
// without it the recipient its requests name.
func ActorShare(total int64) int64 { return max(total/4, 1) }

// DefaultAnswerBudget lets a connection hold four of the largest bundles
// (about 16 MiB each), the server 320 MiB and two of the largest wait for
// room, so that no abuse of unread answers makes the hub hold more than its
// stated memory budget (docs/operations.md).
var DefaultAnswerBudget = AnswerBudget{PerConnection: 64 << 20, Total: 320 << 20, Waiting: 32 << 20, Wait: 5 * time.Second}

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
		setPositive(&o.answers.Waiting, b.Waiting)
		setPositive(&o.answers.Wait, b.Wait)
	}
}

// answerBudgets is a stats handler that gives each connection its budget,
// in the context its calls derive from.
type answerBudgets struct {
	perConn int64
	total   *semaphore.Weighted
	actors  *actorShares
	waiting *semaphore.Weighted
	wait    time.Duration
}

func newAnswerBudgets(b AnswerBudget) answerBudgets {
	return answerBudgets{perConn: b.PerConnection, total: semaphore.NewWeighted(b.Total),
		actors:  &actorShares{limit: ActorShare(b.Total), byActor: map[string]*actorShare{}},
		waiting: semaphore.NewWeighted(b.Waiting), wait: b.Wait}
}

// actorShares are what each actor's answers hold of the server's total, on
// all its connections; an actor's share is kept while it holds or waits for
// some of it.
type actorShares struct {
	limit   int64
	mu      sync.Mutex
	byActor map[string]*actorShare
}

type actorShare struct {
	actor   string
	sem     *semaphore.Weighted
	held    int64 // under actorShares.mu
	waiting int   // under actorShares.mu
}

// take takes n of actor's share, waiting until ctx ends; "" (an answer
// for no actor) takes nothing and returns nil.
func (a *actorShares) take(ctx context.Context, actor string, n int64) (*actorShare, bool) {
	return a.takeBy(actor, n, func(sem *semaphore.Weighted) bool { return sem.Acquire(ctx, n) == nil })
}

// tryTake takes n of actor's share if it has room now (and no answer waits
// for it).
func (a *actorShares) tryTake(actor string, n int64) (*actorShare, bool) {
	return a.takeBy(actor, n, func(sem *semaphore.Weighted) bool { return sem.TryAcquire(n) })
}

// takeBy takes n of actor's share with acquire.
func (a *actorShares) takeBy(actor string, n int64, acquire func(*semaphore.Weighted) bool) (*actorShare, bool) {
	if actor == "" {
		return nil, true
	}
	a.mu.Lock()
	s := a.byActor[actor]
	if s == nil {
		s = &actorShare{actor: actor, sem: semaphore.NewWeighted(a.limit)}
		a.byActor[actor] = s
	}
	s.waiting++
	a.mu.Unlock()
	ok := acquire(s.sem)
	a.mu.Lock()
	defer a.mu.Unlock()
	s.waiting--
	if !ok {
		a.dropLocked(s)
		return nil, false
	}
	s.held += n
	return s, true
}

// give gives n back to s (nil: nothing was taken).
func (a *actorShares) give(s *actorShare, n int64) {
	if s == nil {
		return
	}
	s.sem.Release(n)
	a.mu.Lock()
	defer a.mu.Unlock()
	s.held -= n
	a.dropLocked(s)
}

func (a *actorShares) dropLocked(s *actorShare) {
	if s.held == 0 && s.waiting == 0 && a.byActor[s.actor] == s {
		delete(a.byActor, s.actor)
	}
}

type connAnswersKey struct{}

// connAnswers is one connection's budget. What its answers hold of the
// server's total is given back when the connection ends, whatever gRPC did
// with their buffers.
type connAnswers struct {
	own     *semaphore.Weighted
	total   *semaphore.Weighted
	actors  *actorShares
	waiting *semaphore.Weighted // the server's, for answers waiting for room
	wait    time.Duration

	mu     sync.Mutex
	held   int64                 // of total
	heldOf map[*actorShare]int64 // of actors' shares
	closed bool
}

func (b answerBudgets) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connAnswersKey{}, &connAnswers{own: semaphore.NewWeighted(b.perConn), total: b.total,
		actors: b.actors, waiting: b.waiting, wait: b.wait, heldOf: map[*actorShare]int64{}})
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
		for share, n := range c.heldOf {
			c.actors.give(share, n)
		}
		clear(c.heldOf)
		c.mu.Unlock()
	}
}

func (answerBudgets) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (answerBudgets) HandleRPC(context.Context, stats.RPCStats)                       {}

// reserve takes n bytes of the call's connection, of actor's share ("" for
// an answer to no actor) and of the server, waiting at most the budget's
// Wait (in the server's room for waiting answers: none left, it is refused
// at once), and returns what gives them back (once). Without a budget in
// ctx (a server without one) it takes nothing.
func reserve(ctx context.Context, actor string, n int64) (func(), error) {
	c, ok := ctx.Value(connAnswersKey{}).(*connAnswers)
	if !ok || n < smallAnswer {
		return func() {}, nil
	}
	share, ok := c.tryTake(actor, n)
	if !ok {
		if !c.waiting.TryAcquire(n) {
			return nil, status.Error(codes.ResourceExhausted, fmt.Sprintf(
				"answers not yet read by their clients hold all the room, and answers waiting for room all the room to wait in; an answer of %d bytes is refused at once: read the answers of earlier calls first",
				n))
		}
		defer c.waiting.Release(n)
		var err error
		if share, err = c.take(ctx, actor, n); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.total.Release(n)
		c.actors.give(share, n)
		c.own.Release(n)
		return nil, status.Error(codes.Canceled, "the connection closed")
	}
	c.held += n
	if share != nil {
		c.heldOf[share] += n
	}
	c.mu.Unlock()
	return sync.OnceFunc(func() {
		c.own.Release(n)
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.closed {
			c.held -= n
			c.total.Release(n)
			if share != nil {
				if c.heldOf[share] -= n; c.heldOf[share] == 0 {
					delete(c.heldOf, share)
				}
				c.actors.give(share, n)
			}
		}
	}), nil
}

// tryTake takes n of the connection, of actor's share and of the server if
// all have room now; otherwise it takes nothing.
func (c *connAnswers) tryTake(actor string, n int64) (*actorShare, bool) {
	if !c.own.TryAcquire(n) {
		return nil, false
	}
	share, ok := c.actors.tryTake(actor, n)
	if !ok {
		c.own.Release(n)
		return nil, false
	}
	if !c.total.TryAcquire(n) {
		c.actors.give(share, n)
		c.own.Release(n)
		return nil, false
	}
	return share, true
}

// take takes n of the connection, of actor's share and of the server,
// waiting at most the budget's Wait for each.
func (c *connAnswers) take(ctx context.Context, actor string, n int64) (*actorShare, error) {
	wctx, cancel := context.WithTimeout(ctx, c.wait)
	defer cancel()
	if err := c.own.Acquire(wctx, n); err != nil {
		return nil, refused(ctx, n, "this connection", c.wait)
	}
	share, ok := c.actors.take(wctx, actor, n)
	if !ok {
		c.own.Release(n)
		return nil, refused(ctx, n, "this actor's share (a quarter of the server's, on all its connections)", c.wait)
	}
	if err := c.total.Acquire(wctx, n); err != nil {
		c.actors.give(share, n)
		c.own.Release(n)
		return nil, refused(ctx, n, "the server", c.wait)
	}
	return share, nil
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
	release, err := reserve(ctx, actorOf(m), int64(proto.Size(m)))
	if err != nil {
		return nil, err
	}
	return &heldAnswer{msg: resp, release: release}, nil
}

// actorOf is the actor an answer delivers to (see ActorShare): its bundle's
// recipient, for the answers of Peek and PeekContent; "" for any other.
func actorOf(m proto.Message) string {
	switch m := m.(type) {
	case *messagehubv1.PeekResponse:
		return m.GetBundle().GetRecipient()
	case *messagehubv1.PeekContentChunk:
		return m.GetBundle().GetRecipient()
	}
	return ""
}
