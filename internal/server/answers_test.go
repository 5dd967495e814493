package server

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/apiconv"
	"github.com/energydatahub/messagehub/internal/domain"
)

// heapInUse is the heap in use without garbage, nor buffers only pooled
// (sync.Pool keeps them through one collection).
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Peeks on one connection whose answers the client never reads (its window
// is shut) hold at most the connection's answer budget: the answers beyond
// it are refused with RESOURCE_EXHAUSTED once they have waited the budget's
// Wait. (Without the
// budget every one of them held its whole encoded bundle: 100 Peeks of a 15
// MB bundle, 1.35 GB.)
func TestUnreadPeekAnswersHoldAtMostTheConnectionsBudget(t *testing.T) {
	bundle := timeSeriesBundle(50_000)
	unreadAnswersHoldAtMostTheBudget(t, "/messagehub.v1.MessageHub/Peek", bundle,
		proto.Size(&messagehubv1.PeekResponse{Bundle: apiconv.Bundle(bundle)}))
}

// A content peek of a bundle without a document (no provider for its
// domain, or none configured) sends the bundle alone, as large as a Peek's
// answer: unread, it holds the same budget as one, and those beyond it are
// refused.
func TestUnreadContentPeeksOfABundleAloneHoldAtMostTheConnectionsBudget(t *testing.T) {
	bundle := timeSeriesBundle(50_000)
	unreadAnswersHoldAtMostTheBudget(t, "/messagehub.v1.MessageHub/PeekContent", bundle,
		proto.Size(&messagehubv1.PeekContentChunk{Bundle: apiconv.Bundle(bundle)}))
}

// unreadAnswersHoldAtMostTheBudget makes calls of path on one connection
// whose window is shut, each answered with bundle in an answer of size
// bytes, and checks that the answers that fit the connection's budget are
// held and the others refused, and that the heap holds no more than them.
func unreadAnswersHoldAtMostTheBudget(t *testing.T, path string, bundle *domain.Bundle, size int) {
	t.Helper()
	const (
		calls   = 40
		perConn = 8 << 20
	)
	hub := &recordingHub{bundle: bundle}
	budget := WithAnswerBudget(AnswerBudget{PerConnection: perConn, Total: 1 << 30, Wait: 200 * time.Millisecond})
	base := heapInUse()
	c := newRawClientOver(t, hub, []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 0}},
		WithLimits(Limits{MaxConcurrentStreams: calls}), budget)
	req, err := proto.Marshal(&messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		c.callPath(uint32(2*i+1), path, req)
	}
	// Answers that fit are sent (their headers, and nothing of the body
	// through the shut window); the others end with their status.
	answered, ended := 0, 0
	for answered+ended < calls {
		_, ev := c.next(nil)
		switch {
		case ev.answered:
			answered++
		case ev.ended:
			ended++
		default:
			t.Fatalf("a stream was reset: %+v", ev)
		}
	}
	held := int64(heapInUse()) - int64(base)
	fit := perConn / size
	const slack = 4 << 20 // the server, its connection, the test's frames
	t.Logf("%d unread calls of %s, answers of %.1f MiB, on one connection: %d held, %d refused, heap %.1f MiB (budget %d MiB)",
		calls, path, float64(size)/(1<<20), answered, ended, float64(held)/(1<<20), perConn>>20)
	if answered != fit || ended != calls-fit {
		t.Fatalf("%d answers held and %d refused; want %d held in a budget of %d bytes for answers of %d", answered, ended, fit, perConn, size)
	}
	if held > perConn+slack {
		t.Fatalf("unread answers hold %d bytes of heap, over the connection's budget %d and %d slack", held, perConn, slack)
	}
}
