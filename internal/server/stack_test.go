package server

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/stats"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// eventsHandler notes the method tagged and the events of each call.
type eventsHandler struct {
	mu     sync.Mutex
	tagged []string
	ends   int
}

func (h *eventsHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tagged = append(h.tagged, info.FullMethodName)
	return ctx
}

func (h *eventsHandler) HandleRPC(_ context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.End); ok {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.ends++
	}
}

func (*eventsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (*eventsHandler) HandleConn(context.Context, stats.ConnStats)                       {}

// The stats handlers given (the first behind earlyStack) see every call.
func TestStatsHandlersSeeEveryCall(t *testing.T) {
	first, second := &eventsHandler{}, &eventsHandler{}
	conn, _ := testConn(t, &recordingHub{}, WithStatsHandler(first), WithStatsHandler(second))
	client := messagehubv1.NewMessageHubClient(conn)
	if _, err := client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: notifications(1)}); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*eventsHandler{first, second} {
		h.mu.Lock()
		if len(h.tagged) != 1 || h.tagged[0] != "/messagehub.v1.MessageHub/Save" || h.ends != 1 {
			t.Errorf("handler saw %v tagged and %d ends, want the Save once", h.tagged, h.ends)
		}
		h.mu.Unlock()
	}
}
