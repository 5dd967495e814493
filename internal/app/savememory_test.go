package app_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/app"
	"github.com/energydatahub/messagehub/internal/store"
)

// saveFor is a Save of n notifications for recipient.
func saveFor(recipient string, n int) *messagehubv1.SaveRequest {
	req := &messagehubv1.SaveRequest{}
	for range n {
		req.Notifications = append(req.Notifications, notification(recipient))
	}
	return req
}

// --grpc-max-save-memory bounds the Saves the hub holds at once: with the
// first Save held in its group's commit (about 760 KB of a budget of 1
// MiB), a second as large is answered UNAVAILABLE at once, stores nothing,
// and is logged; once the first is stored, its retry is.
func TestTheSaveMemoryRefusesASaveThatDoesNotFit(t *testing.T) {
	const n = 3000 // about 375 KB on the wire, 760 KB as counted
	cfg := testConfig(t, "--grpc-max-save-memory", "1MiB")
	var logs logLines
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	held := newStuckStore() // holds every group's write until answered, then makes it
	held.passing = true
	app.WrapStore(&cfg, func(s store.Store) store.Store { held.Store = s; return held })
	r := start(t, cfg)
	t.Cleanup(held.answer) // before the cleanup that closes the App

	first, second := uuid.NewString(), uuid.NewString()
	saved := make(chan error, 1)
	go func() { _, err := r.client.Save(callContext(t), saveFor(first, n)); saved <- err }()
	held.awaitWrite(t, saved)

	_, err := r.client.Save(callContext(t), saveFor(second, n))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a second Save beyond --grpc-max-save-memory: %v; want UNAVAILABLE", err)
	}
	t.Logf("the second Save: %v", err)
	warned := logs.lines(t, func(m map[string]any) bool {
		return m["level"] == "WARN" && strings.HasPrefix(m["msg"].(string), "Save refused")
	})
	if len(warned) != 1 || warned[0]["limit_bytes"] != float64(1<<20) {
		t.Errorf("warnings of the refused Save: %v; want one naming the limit", warned)
	}

	held.answer()
	if err := <-saved; err != nil {
		t.Fatalf("the first Save: %v", err)
	}
	peeked, err := r.client.Peek(callContext(t), &messagehubv1.PeekRequest{Recipient: second})
	if err != nil || peeked.GetBundle() != nil {
		t.Fatalf("the refused Save's recipient: %v, %v; want nothing stored", peeked.GetBundle(), err)
	}
	resp, err := r.client.Save(callContext(t), saveFor(second, n))
	if err != nil || resp.GetSaved() != n {
		t.Fatalf("the retry: %v, %d saved; want %d", err, resp.GetSaved(), n)
	}
}
