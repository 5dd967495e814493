package gateway

import (
	"net/http"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	"github.com/energydatahub/messagehub/internal/server"
)

// A Peek's answer over HTTP is rendered whole before it is written: the
// largest bundle (51,200 notifications) is tens of MiB of JSON. One whose
// client does not read it holds that until it is cut, so answers being
// written share a byte budget, one actor's at most its share of it
// (server.ActorShare) on all its connections (a peek beyond it is answered
// 503 with Retry-After, and its bundle stays pending for the next peek),
// and an answer whose client reads nothing for the stall time is cut.
const (
	// DefaultPeekAnswerBytes bounds the Peek answers being written at once.
	DefaultPeekAnswerBytes = 128 << 20
	// DefaultPeekAnswerBytesPerConn bounds those of one connection.
	DefaultPeekAnswerBytesPerConn = 64 << 20
	// smallPeekAnswer is the size below which answers are not counted: an
	// empty peek or a small bundle holds next to nothing.
	smallPeekAnswer = 64 << 10
	// heldPerAnswerByte is what an answer holds while it is written, per
	// byte of its JSON: the message it was rendered from and the gRPC
	// answer it came in stay referenced until the write ends. Measured with
	// test/adversary's unread HTTP Peek answers: about 80 MiB for 15 MiB of
	// JSON.
	heldPerAnswerByte = 5
)

// answersInFlight counts what answers being written hold, in all, per
// connection and per actor (server.ActorShare of the total): the bytes of
// Peek answers, a place per document of content peeks. An answer larger
// than a budget is let through when nothing else holds it, so that any
// bundle can be delivered.
type answersInFlight struct {
	mu                       sync.Mutex
	total, perConn, perActor int64
	inUse                    int64
	byConn, byActor          map[string]int64
}

func newAnswersInFlight(total, perConn int64) *answersInFlight {
	return &answersInFlight{total: total, perConn: perConn, perActor: server.ActorShare(total),
		byConn: map[string]int64{}, byActor: map[string]int64{}}
}

// Budgets of answersInFlight an answer may find full.
const (
	fullTotal = iota + 1
	fullConn
	fullActor
)

// take takes n for an answer on conn to actor ("" for one whose actor is
// not known: only the connection and the total count it), or says which
// budget is full (0 when taken).
func (b *answersInFlight) take(conn, actor string, n int64) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inUse > 0 && b.inUse+n > b.total {
		return fullTotal
	}
	if held := b.byConn[conn]; held > 0 && held+n > b.perConn {
		return fullConn
	}
	if held := b.byActor[actor]; actor != "" && held > 0 && held+n > b.perActor {
		return fullActor
	}
	b.inUse += n
	b.byConn[conn] += n
	if actor != "" {
		b.byActor[actor] += n
	}
	return 0
}

// crowded reports whether the answers being written hold over half of a
// budget: a peek that comes then is refused before anything is read or
// rendered, so that peeks whose answers could not be admitted do not each
// render tens of MiB first.
func (b *answersInFlight) crowded(conn string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return 2*b.inUse > b.total || 2*b.byConn[conn] > b.perConn
}

func (b *answersInFlight) give(conn, actor string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inUse -= n
	if b.byConn[conn] -= n; b.byConn[conn] <= 0 {
		delete(b.byConn, conn)
	}
	if b.byActor[actor] -= n; b.byActor[actor] <= 0 {
		delete(b.byActor, actor)
	}
}

// budgetedPeeks serves next (the Peek routes) with its answers under budget
// and cut after stall without progress.
func budgetedPeeks(mux *runtime.ServeMux, next http.Handler, budget *answersInFlight, o options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if budget.crowded(r.RemoteAddr) {
			refuseBusy(mux, w, r, peekBusy)
			return
		}
		bw := newBudgetedWriter(mux, w, r, budget, o)
		defer bw.release()
		next.ServeHTTP(bw, r)
	})
}

// newBudgetedWriter is w writing r's answer under budget (release it once
// written).
func newBudgetedWriter(mux *runtime.ServeMux, w http.ResponseWriter, r *http.Request, budget *answersInFlight, o options) *budgetedWriter {
	return &budgetedWriter{ResponseWriter: w, mux: mux, r: r, budget: budget,
		out: stallingWriter{w: w, rc: http.NewResponseController(w), stall: o.contentStall}}
}

// budgetedWriter takes an answer's bytes from the budget at its first write
// (grpc-gateway writes a body whole, in one call), and writes it in pieces,
// each of which the client must take within the stall time.
type budgetedWriter struct {
	http.ResponseWriter
	mux         *runtime.ServeMux
	r           *http.Request
	budget      *answersInFlight
	actor       string // the answer's, when known ("": not counted per actor)
	out         stallingWriter
	wroteHeader bool
	held        int64
	refused     bool
}

func (w *budgetedWriter) WriteHeader(code int) {
	w.wroteHeader = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *budgetedWriter) Write(p []byte) (int, error) {
	if w.refused {
		return len(p), nil // the 503 is written; the answer is dropped
	}
	if !w.wroteHeader && w.held == 0 && len(p) > smallPeekAnswer {
		if w.budget.take(w.r.RemoteAddr, w.actor, heldPerAnswerByte*int64(len(p))) != 0 {
			w.refused = true
			w.Header().Del(MessageIDHeader)
			refuseBusy(w.mux, w.ResponseWriter, w.r, peekBusy)
			return len(p), nil
		}
		w.held = heldPerAnswerByte * int64(len(p))
	}
	if w.held == 0 {
		return w.ResponseWriter.Write(p) //nolint:gosec // JSON of our own: a bundle (a content peek's sandboxed by peekContent)
	}
	if err := w.out.write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// peekBusy is refuseBusy's message for a peek: the bundle, if one was cut,
// stays pending for the next peek.
const peekBusy = "too many large answers being written; peek again shortly (a pending bundle stays pending)"

func (w *budgetedWriter) release() {
	if w.held > 0 {
		w.budget.give(w.r.RemoteAddr, w.actor, w.held)
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *budgetedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
