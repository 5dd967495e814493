package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// TestVerifySoakFindsEachKindOfDamage feeds the soak's checker a correct
// run and damaged copies of it, so that a checker that stops checking is
// noticed.
func TestVerifySoakFindsEachKindOfDamage(t *testing.T) {
	const r = "00000000-0000-4000-8000-000000000001"
	a, b := soakCabinets[0], soakCabinets[1]
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	n := func(id string, c cabinet) *messagehubv1.DataAvailable {
		return &messagehubv1.DataAvailable{Id: id, Recipient: r, Origin: c.origin, ContentType: c.contentType}
	}
	bundle := func(id string, c cabinet, ids ...string) *messagehubv1.Bundle {
		return &messagehubv1.Bundle{Id: id, Recipient: r, Origin: c.origin, ContentType: c.contentType, NotificationIds: ids}
	}
	// Save 0 is acknowledged before Save 1 is sent; bundle x holds cabinet
	// a, bundle y cabinet b.
	base := func() *soakLog {
		x, y := bundle("x", a, "a1", "a2", "a3"), bundle("y", b, "b1", "b2")
		return &soakLog{
			saves: []soakSave{
				{ns: []*messagehubv1.DataAvailable{n("a1", a), n("a2", a), n("b1", b)}, start: at(0), end: at(10)},
				{ns: []*messagehubv1.DataAvailable{n("a3", a), n("b2", b)}, start: at(20), end: at(30)},
			},
			peeks:     []soakPeek{{start: at(40), end: at(45), bundle: x}, {start: at(41), end: at(46), bundle: y}},
			dequeued:  map[string]time.Time{"x": at(50), "y": at(55)},
			uncertain: map[string]bool{},
			bundles:   map[string]*messagehubv1.Bundle{"x": x, "y": y},
		}
	}
	tests := []struct {
		name   string
		damage func(l *soakLog)
		want   string // part of a problem; "" means none
	}{
		{name: "correct delivery", damage: func(*soakLog) {}},
		{name: "a Dequeue that failed in transit acknowledged its bundle", want: "",
			damage: func(l *soakLog) { delete(l.dequeued, "x"); l.uncertain["x"] = true }},
		{name: "notification lost", want: "a3 saved, never delivered",
			damage: func(l *soakLog) { l.bundles["x"].NotificationIds = []string{"a1", "a2"} }},
		{name: "notification delivered twice", want: "delivered in bundles",
			damage: func(l *soakLog) {
				z := bundle("z", a, "a3")
				l.bundles["z"], l.dequeued["z"] = z, at(70)
				l.peeks = append(l.peeks, soakPeek{start: at(60), end: at(65), bundle: z})
			}},
		{name: "request order broken", want: "request order",
			damage: func(l *soakLog) { l.bundles["x"].NotificationIds = []string{"a2", "a1", "a3"} }},
		{name: "a later Save delivered first in a cabinet", want: "acknowledged before Save 1 was sent",
			damage: func(l *soakLog) {
				l.bundles["x"].NotificationIds = []string{"a3"}
				x2 := bundle("x2", a, "a1", "a2")
				l.bundles["x2"], l.dequeued["x2"] = x2, at(70)
				l.peeks = append(l.peeks, soakPeek{start: at(60), end: at(65), bundle: x2})
			}},
		{name: "bundle handed out after its Dequeue returned", want: "after Dequeue(x) returned",
			damage: func(l *soakLog) {
				l.peeks = append(l.peeks, soakPeek{start: at(51), end: at(52), bundle: l.bundles["x"]})
			}},
		{name: "notification of another cabinet", want: "of another cabinet",
			damage: func(l *soakLog) {
				l.bundles["y"].NotificationIds = []string{"b1", "a3", "b2"}
				l.bundles["x"].NotificationIds = []string{"a1", "a2"}
			}},
		{name: "notification nobody saved", want: "no Save sent it",
			damage: func(l *soakLog) { l.bundles["y"].NotificationIds = append(l.bundles["y"].NotificationIds, "zz") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := base()
			tt.damage(l)
			problems := verifySoak(l)
			switch {
			case tt.want == "" && len(problems) > 0:
				t.Errorf("problems in a correct run:\n%s", strings.Join(problems, "\n"))
			case tt.want != "" && !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tt.want) }):
				t.Errorf("no problem mentions %q; got:\n%s", tt.want, strings.Join(problems, "\n"))
			}
		})
	}
}
