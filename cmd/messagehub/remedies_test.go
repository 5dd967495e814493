package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// "messagehub admin release" and "acknowledge" act on a running hub at
// once and say what they did; without their flags they refuse before
// calling anything.
func TestTheAdminCommandRemediesARunningHub(t *testing.T) {
	ctx, a, conn := runningHub(t)
	hub := messagehubv1.NewMessageHubClient(conn)
	recipient := uuid.NewString()
	var notes []*messagehubv1.DataAvailable
	for range 3 {
		notes = append(notes, &messagehubv1.DataAvailable{
			Id: uuid.NewString(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_CHARGES,
			ContentType: "Charges", DocumentType: "ChargesDoc", SupportsBundling: true, Weight: 1,
		})
	}
	if _, err := hub.Save(ctx, &messagehubv1.SaveRequest{Notifications: notes}); err != nil {
		t.Fatal(err)
	}
	peeked, err := hub.Peek(ctx, &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		t.Fatal(err)
	}
	admin := func(args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := runAdmin(ctx, append(args, "--addr", a.GRPCAddr(), "--recipient", recipient), &out, io.Discard)
		// protojson varies its spacing on purpose: compare words.
		return strings.Join(strings.Fields(out.String()), " "), err
	}
	for _, args := range [][]string{
		{"release", "--bundle", peeked.GetBundle().GetId()},
		{"release", "--reason", "stuck"},
		{"acknowledge", "--domain", "CHARGES", "--content-type", "Charges", "--up-to", notes[0].GetId()},
		{"acknowledge", "--domain", "NO_SUCH", "--content-type", "Charges", "--up-to", notes[0].GetId(), "--reason", "x"},
	} {
		if _, err := admin(args...); err == nil {
			t.Fatalf("admin %v: no error", args)
		}
	}

	out, err := admin("release", "--bundle", peeked.GetBundle().GetId(), "--reason", "the actor lost its state")
	if err != nil || !strings.Contains(out, "released bundle "+peeked.GetBundle().GetId()) || !strings.Contains(out, `"notificationCount": 3`) {
		t.Fatalf("release: %v\n%s", err, out)
	}
	again, err := hub.Peek(ctx, &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil || again.GetBundle().GetId() == peeked.GetBundle().GetId() {
		t.Fatalf("the actor's peek after the release: %v, %v", again.GetBundle(), err)
	}
	out, err = admin("acknowledge", "--domain", "charges", "--content-type", "Charges", "--up-to", notes[2].GetId(), "--reason", "ticket 4711")
	if err != nil || !strings.Contains(out, "dequeued 3 notifications") || !strings.Contains(out, again.GetBundle().GetId()) {
		t.Fatalf("acknowledge: %v\n%s", err, out)
	}
	if resp, err := hub.Peek(ctx, &messagehubv1.PeekRequest{Recipient: recipient}); err != nil || resp.GetBundle() != nil {
		t.Fatalf("the actor's peek after the acknowledge: %v, %v", resp.GetBundle(), err)
	}
	if _, err := admin("release", "--bundle", again.GetBundle().GetId(), "--reason", "again"); err == nil || !strings.Contains(err.Error(), "dequeued") {
		t.Fatalf("releasing a dequeued bundle: %v", err)
	}
}

// "messagehub admin acknowledge" over a backlog of more bundles than one
// call of the hub dequeues (notifications that do not support bundling: a
// bundle each) calls again until none remain, a line per call; run again,
// it finds nothing to do.
func TestTheAdminCommandAcknowledgesALargeBacklogInCalls(t *testing.T) {
	ctx, a, conn := runningHub(t)
	hub := messagehubv1.NewMessageHubClient(conn)
	recipient := uuid.NewString()
	const n = 250 // three calls of at most 100 bundles
	var notes []*messagehubv1.DataAvailable
	for range n {
		notes = append(notes, &messagehubv1.DataAvailable{
			Id: uuid.NewString(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_CHARGES,
			ContentType: "Charges", DocumentType: "ChargesDoc", SupportsBundling: false, Weight: 1,
		})
	}
	if _, err := hub.Save(ctx, &messagehubv1.SaveRequest{Notifications: notes}); err != nil {
		t.Fatal(err)
	}
	acknowledge := func() string {
		t.Helper()
		var out bytes.Buffer
		err := runAdmin(ctx, []string{"acknowledge", "--addr", a.GRPCAddr(), "--recipient", recipient, "--domain", "charges",
			"--content-type", "Charges", "--up-to", notes[n-1].GetId(), "--reason", "ticket 4716"}, &out, io.Discard)
		if err != nil {
			t.Fatalf("acknowledge: %v\n%s", err, out.String())
		}
		return out.String()
	}
	out := acknowledge()
	for _, line := range []string{"call 1: dequeued 100 notifications in 100 bundles", "call 2: dequeued 100 notifications in 100 bundles",
		"call 3: dequeued 50 notifications in 50 bundles", "dequeued 250 notifications of recipient " + recipient} {
		if !strings.Contains(out, line) {
			t.Fatalf("acknowledge said\n%s\nwithout %q", out, line)
		}
	}
	if strings.Contains(out, "call 4") {
		t.Fatalf("acknowledge called a fourth time:\n%s", out)
	}
	if resp, err := hub.Peek(ctx, &messagehubv1.PeekRequest{Recipient: recipient}); err != nil || resp.GetBundle() != nil {
		t.Fatalf("the actor's peek after the acknowledge: %v, %v", resp.GetBundle(), err)
	}
	if out := acknowledge(); !strings.Contains(out, "nothing to dequeue") || strings.Contains(out, "call 1") {
		t.Fatalf("acknowledge again said\n%s", out)
	}
}
