package crash

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

type notif = messagehubv1.DataAvailable

// TestVerifyFindsEachKindOfDamage feeds the checker a correct delivery and
// damaged copies of it, so that a checker that stops checking is noticed.
func TestVerifyFindsEachKindOfDamage(t *testing.T) {
	const r = "00000000-0000-4000-8000-000000000001"
	a, b := cabinets[0], cabinets[3]
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	n := func(id string, c cabinet, bundling bool) *notif {
		x := newNotification(r, c, 1, 0)
		x.Id, x.SupportsBundling = id, bundling
		return x
	}
	killedAt := at(40)
	// Sequence numbers as a correct hub gives them: a1=1 a2=2 b1=3 a3=4 b2=5
	// a4=6 b3=7 pA=8 pB=9.
	base := func() []saveRec {
		return []saveRec{
			{notifications: []*notif{n("a1", a, true), n("a2", a, true), n("b1", b, true)}, start: at(0), end: at(10), acked: true},
			{notifications: []*notif{n("a3", a, true), n("b2", b, true)}, start: at(20), end: at(30), acked: true},
			{notifications: []*notif{n("a4", a, true), n("b3", b, true)}, start: at(25), end: at(45),
				err: status.Error(codes.Unavailable, "connection reset")},
			{notifications: []*notif{n("pA", a, false), n("pB", b, true)}, start: at(50), end: at(60), acked: true, probe: true},
		}
	}
	good := func() []bundleRec {
		return []bundleRec{
			{id: "0", cab: a, ids: []string{"a1", "a2", "a3", "a4"}},
			{id: "1", cab: b, ids: []string{"b1", "b2", "b3", "pB"}},
			{id: "2", cab: a, ids: []string{"pA"}},
		}
	}
	tests := []struct {
		name    string
		saves   func([]saveRec)
		bundles func([]bundleRec) []bundleRec
		want    string // part of a problem; "" means none
	}{
		{name: "correct delivery", want: ""},
		{name: "in-flight Save not stored", want: "",
			bundles: func(bs []bundleRec) []bundleRec {
				bs[0].ids = []string{"a1", "a2", "a3"}
				bs[1].ids = []string{"b1", "b2", "pB"}
				return bs
			}},
		{name: "acknowledged notification lost", want: "Save of 2 notifications: 1 delivered",
			bundles: func(bs []bundleRec) []bundleRec { bs[0].ids = []string{"a1", "a2", "a4"}; return bs }},
		{name: "notification delivered twice", want: "delivered twice",
			bundles: func(bs []bundleRec) []bundleRec { bs[0].ids = []string{"a1", "a2", "a2", "a3", "a4"}; return bs }},
		{name: "in-flight Save partly stored", want: "partly visible",
			bundles: func(bs []bundleRec) []bundleRec { bs[0].ids = []string{"a1", "a2", "a3"}; return bs }},
		{name: "request order broken", want: "request order",
			bundles: func(bs []bundleRec) []bundleRec { bs[0].ids = []string{"a2", "a1", "a3", "a4"}; return bs }},
		{name: "Saves interleaved in a cabinet", want: "acknowledged before",
			bundles: func(bs []bundleRec) []bundleRec { bs[0].ids = []string{"a1", "a3", "a2", "a4"}; return bs }},
		{name: "later Save peeked first across cabinets", want: "starts with Save 1",
			bundles: func([]bundleRec) []bundleRec {
				// b2 (Save 1) heads a bundle while a1, a2 of Save 0 (acknowledged
				// before Save 1 started) are still undelivered.
				return []bundleRec{
					{id: "0", cab: b, ids: []string{"b1"}},
					{id: "1", cab: b, ids: []string{"b2", "b3", "pB"}},
					{id: "2", cab: a, ids: []string{"a1", "a2", "a3", "a4"}},
					{id: "3", cab: a, ids: []string{"pA"}},
				}
			}},
		{name: "sequence numbers reused", want: "reused",
			bundles: func(bs []bundleRec) []bundleRec { return []bundleRec{bs[0], bs[2], bs[1]} }},
		{name: "unknown notification delivered", want: "no Save of this cycle sent",
			bundles: func(bs []bundleRec) []bundleRec { bs[2].ids = append(bs[2].ids, "zz"); return bs }},
		{name: "wrong cabinet", want: "delivers b1",
			bundles: func(bs []bundleRec) []bundleRec {
				bs[0].ids = []string{"a1", "a2", "b1", "a3", "a4"}
				bs[1].ids = []string{"b2", "b3", "pB"}
				return bs
			}},
		{name: "Save refused before the kill", want: "before the kill",
			saves: func(ss []saveRec) {
				ss[2].end = at(35)
				ss[2].err = status.Error(codes.Internal, "internal error")
			}},
		{name: "in-flight Save answered with a wrong code", want: "want UNAVAILABLE",
			saves: func(ss []saveRec) { ss[2].err = errors.New("boom") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			saves, bundles := base(), good()
			if tt.saves != nil {
				tt.saves(saves)
			}
			if tt.bundles != nil {
				bundles = tt.bundles(bundles)
			}
			problems, _ := verify([]string{r}, saves, killedAt, map[string][]bundleRec{r: bundles}, map[string]bool{})
			switch {
			case tt.want == "" && len(problems) > 0:
				t.Errorf("problems in a correct delivery:\n%s", strings.Join(problems, "\n"))
			case tt.want != "" && !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tt.want) }):
				t.Errorf("no problem mentions %q; got:\n%s", tt.want, strings.Join(problems, "\n"))
			}
		})
	}
}
