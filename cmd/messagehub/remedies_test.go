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
