package gateway_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/gateway"
	"github.com/energydatahub/messagehub/internal/server"
)

// One actor cannot take every place of the documents being answered by
// opening more connections: it holds at most its share of them (a quarter),
// the peeks beyond are refused with 503, Retry-After and a message naming
// the actor's limit, and another actor's document is answered meanwhile.
func TestOneActorsUnreadDocumentsLeaveOtherActorsTheirPlaces(t *testing.T) {
	const (
		places  = 8 // an actor's share: 2
		docSize = 4 << 20
	)
	document := bytes.Repeat([]byte("0123456789abcdef"), docSize/16)
	docs := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("application/octet-stream", document, 1<<20)
	}).Documents(t)
	// Each peek on a connection of its own, so that the connections' limit
	// plays no part: the answers stay unread until the test ends.
	s := newStackServing(t, []server.Option{server.WithDocuments(docs, time.Minute)}, smallBuffers,
		gateway.WithContentPeeks(places, places), gateway.WithContentStall(time.Hour))
	greedy, other := uuid.NewString(), uuid.NewString()
	s.saveOne(t, greedy, domain.OriginTimeSeries)
	s.saveOne(t, other, domain.OriginTimeSeries)

	statuses := map[int]int{}
	var refused []refusal
	for range places {
		code, r := getUnreadRefusal(t, s, "/v1/peek/content?recipient="+greedy)
		statuses[code]++
		if code != http.StatusOK {
			refused = append(refused, r)
		}
	}
	if statuses[http.StatusOK] != places/4 || statuses[http.StatusServiceUnavailable] != places-places/4 {
		t.Fatalf("one actor's %d unread content peeks on %d connections: %v; want %d × 200 (its share of %d places) and the rest 503",
			places, places, statuses, places/4, places)
	}
	for _, r := range refused {
		if r.retryAfter == "" || !strings.Contains(r.message, "this actor") {
			t.Fatalf("a peek beyond the actor's share refused with Retry-After %q and %q; want Retry-After and the actor's limit named",
				r.retryAfter, r.message)
		}
	}
	if code, r := getUnreadRefusal(t, s, "/v1/peek/content?recipient="+other); code != http.StatusOK {
		t.Fatalf("another actor's content peek while the first holds its unread answers: %d %q; want 200", code, r.message)
	}
}

// The Peek answers being written over HTTP are shared the same way: one
// actor's unread answers hold at most its share of their budget (a quarter;
// an answer alone is let through), so another actor's Peek is answered
// while the first actor's answers sit unread on connections of their own.
func TestOneActorsUnreadPeekAnswersLeaveOtherActorsRoom(t *testing.T) {
	// Bundles of about 8 MiB of JSON, each holding about 40 MiB while it
	// is written: two fit the budget of 128 MiB, more than one does not
	// fit an actor's share of 32 MiB.
	const notifications = 27_000
	s := newStackServing(t, nil, smallBuffers, gateway.WithContentStall(time.Hour))
	greedy, other := uuid.NewString(), uuid.NewString()
	s.saveWideBundle(t, greedy, notifications)
	s.saveWideBundle(t, other, notifications)
	statuses := []int{getUnread(t, s, "/v1/peek?recipient="+greedy), getUnread(t, s, "/v1/peek?recipient="+greedy)}
	if statuses[0] != http.StatusOK || statuses[1] != http.StatusServiceUnavailable {
		t.Fatalf("one actor's two unread Peeks of a bundle of %d notifications on two connections: %v; want 200 (its share) and 503",
			notifications, statuses)
	}
	if code, r := getUnreadRefusal(t, s, "/v1/peek?recipient="+other); code != http.StatusOK {
		t.Fatalf("another actor's Peek while the first holds its unread answer: %d %q; want 200", code, r.message)
	}
}
