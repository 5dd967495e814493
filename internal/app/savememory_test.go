package app_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/app"
	"github.com/energydatahub/messagehub/internal/store"
)

// heldStore holds every group's write until the test lets them go, then
// writes them: the Saves of the group being written, and those queued
// behind it, stay in the hub.
type heldStore struct {
	store.Store
	entered chan struct{} // a group's write reached the store
	release chan struct{} // closed: the writes go on
	once    sync.Once
}

func (s *heldStore) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	return s.Store.CommitSaves(ctx, saves)
}

func (s *heldStore) letGo() { s.once.Do(func() { close(s.release) }) }

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
	held := &heldStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	app.WrapStore(&cfg, func(s store.Store) store.Store { held.Store = s; return held })
	r := start(t, cfg)
	t.Cleanup(held.letGo) // before the cleanup that closes the App

	first, second := uuid.NewString(), uuid.NewString()
	saved := make(chan error, 1)
	go func() { _, err := r.client.Save(callContext(t), saveFor(first, n)); saved <- err }()
	select {
	case <-held.entered:
	case err := <-saved:
		t.Fatalf("the first Save answered before its write reached the store: %v", err)
	case <-time.After(callTimeout):
		t.Fatal("the first Save's write did not reach the store")
	}

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

	held.letGo()
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
