package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
)

// holdingHub is a stand-in for the hub at the transport edge only: its
// Saves stay in it, as a Save queued for its group's commit does, until the
// test lets them go, so that the test decides how many the server holds.
type holdingHub struct {
	recordingHub
	entered chan int      // a Save reached the hub (its notifications)
	release chan struct{} // closed: the Saves held answer
	once    sync.Once
}

func newHoldingHub() *holdingHub {
	return &holdingHub{entered: make(chan int, 8), release: make(chan struct{})}
}

func (h *holdingHub) Save(ctx context.Context, ns []domain.Notification) (domain.SaveResult, error) {
	h.entered <- len(ns)
	<-h.release
	if _, err := h.recordingHub.Save(ctx, ns); err != nil {
		return domain.SaveResult{}, err
	}
	return domain.SaveResult{Saved: len(ns)}, nil
}

func (h *holdingHub) letGo() { h.once.Do(func() { close(h.release) }) }

// saveOf is a Save of n notifications.
func saveOf(n int) *messagehubv1.SaveRequest {
	return &messagehubv1.SaveRequest{Notifications: notifications(n)}
}

// A Save of 3,000 notifications weighs its 372 KB on the wire and 128 bytes
// for each decoded notification, about 756 KB: one fits a budget of 1 MiB,
// two do not.
const heldSaveNotifications = 3000

// awaitEntered waits for a Save to reach the hub, and fails the test if
// saved answers first.
func awaitEntered(t *testing.T, h *holdingHub, saved <-chan error) {
	t.Helper()
	select {
	case <-h.entered:
	case err := <-saved:
		t.Fatalf("the Save answered before it reached the hub: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the Save did not reach the hub")
	}
}

// The Saves the server holds at once (decoded, waiting for the hub) are
// bounded by Limits.MaxSaveMemory: a Save that does not fit beside those
// held is answered UNAVAILABLE, which clients retry, without reaching the
// hub; once the held ones answer, its retry is stored.
func TestSavesBeyondTheSaveMemoryAreRefused(t *testing.T) {
	hub := newHoldingHub()
	t.Cleanup(hub.letGo)
	logs := make(logRecords, 64)
	srv, _ := NewGRPCServer(hub, slog.New(logs), WithLimits(Limits{MaxSaveMemory: 1 << 20}))
	client := messagehubv1.NewMessageHubClient(serveConn(t, srv))
	req := saveOf(heldSaveNotifications)
	t.Logf("a Save of %d notifications: %d bytes on the wire", heldSaveNotifications, proto.Size(req))

	held := make(chan error, 1)
	go func() { _, err := client.Save(ctxT(t), req); held <- err }()
	awaitEntered(t, hub, held)

	_, err := client.Save(ctxT(t), saveOf(heldSaveNotifications))
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "try again") {
		t.Fatalf("a Save beyond the save memory: %v; want UNAVAILABLE asking to try again", err)
	}
	if len(hub.entered) != 0 {
		t.Fatal("the refused Save reached the hub")
	}
	// The operator is told once, at warn, and not again by the call's
	// UNAVAILABLE line.
	var warned []string
	for _, r := range logs.beforeAccessLine(t) {
		if r.Level >= slog.LevelWarn {
			warned = append(warned, fmt.Sprintf("%s %v", r.Message, attrOf(r, "limit_bytes")))
		}
	}
	if want := "Save refused: the Saves held take all the memory allowed them; clients retry 1048576"; len(warned) != 1 || warned[0] != want {
		t.Errorf("the warnings of the refused Save: %q; want [%q]", warned, want)
	}

	// A small Save still fits beside the held one.
	small := make(chan error, 1)
	go func() { _, err := client.Save(ctxT(t), saveOf(1)); small <- err }()
	awaitEntered(t, hub, small)

	hub.letGo()
	for _, c := range []chan error{held, small} {
		if err := <-c; err != nil {
			t.Fatalf("a held Save: %v", err)
		}
	}
	// Their memory is given back: the refused Save, retried, is stored.
	resp, err := client.Save(ctxT(t), saveOf(heldSaveNotifications))
	if err != nil || resp.GetSaved() != heldSaveNotifications {
		t.Fatalf("the retry once the held Saves answered: %v, %d saved", err, resp.GetSaved())
	}
	if got := len(hub.saves); got != 3 {
		t.Errorf("the hub stored %d Saves, want 3 (the held two and the retry)", got)
	}
}

// A Save larger than the whole budget is let through when nothing else is
// held, as one HTTP body is: a budget below the largest Save refuses no
// Save for ever.
func TestASaveLargerThanTheSaveMemoryPassesAlone(t *testing.T) {
	hub := newHoldingHub()
	hub.letGo()
	client := saveClient(t, hub, WithLimits(Limits{MaxSaveMemory: 1 << 10}))
	if _, err := client.Save(ctxT(t), saveOf(heldSaveNotifications)); err != nil {
		t.Fatalf("a Save over the budget, alone: %v", err)
	}
}

// The gateway's server (InProcessLimits) does not bound Saves by memory:
// the HTTP server bounds their bodies already (--http-max-body-memory),
// for as long as their calls last.
func TestTheGatewaysServerLeavesSavesToTheHTTPBudget(t *testing.T) {
	hub := newHoldingHub()
	t.Cleanup(hub.letGo)
	client := saveClient(t, hub, WithLimits(Limits{MaxSaveMemory: 1 << 20}), WithLimits(InProcessLimits))
	const saves = 3 // 2.2 MB, twice the budget the first WithLimits set
	answered := make(chan error, saves)
	for range saves {
		go func() { _, err := client.Save(ctxT(t), saveOf(heldSaveNotifications)); answered <- err }()
	}
	for range saves {
		awaitEntered(t, hub, answered)
	}
	hub.letGo()
	for range saves {
		if err := <-answered; err != nil {
			t.Fatalf("a Save: %v", err)
		}
	}
}

// beforeAccessLine reads the records of one call up to its access log
// line (the last the server writes for it) and returns those before it.
func (l logRecords) beforeAccessLine(t *testing.T) []slog.Record {
	t.Helper()
	var before []slog.Record
	for {
		select {
		case r := <-l:
			if r.Message == "call" {
				return before
			}
			before = append(before, r)
		case <-ctxT(t).Done():
			t.Fatal("no access log line")
		}
	}
}

// attrOf is the value of r's attribute key (nil: none).
func attrOf(r slog.Record, key string) any {
	var v any
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.Any()
		}
		return a.Key != key
	})
	return v
}

// saveClient serves hub with opts and returns a client.
func saveClient(t *testing.T, hub Hub, opts ...Option) messagehubv1.MessageHubClient {
	t.Helper()
	conn, _ := testConn(t, hub, opts...)
	return messagehubv1.NewMessageHubClient(conn)
}
