package domain_test

import (
	"math"
	"testing"

	"github.com/energydatahub/messagehub/internal/domain"
)

// offer is one notification offered to a BundleCutter.
type offer struct {
	bundling bool
	weight   int64
}

func b(w int64) offer  { return offer{true, w} }  // supports bundling
func nb(w int64) offer { return offer{false, w} } // does not support bundling

func repeatOffer(o offer, n int) []offer {
	out := make([]offer, n)
	for i := range out {
		out[i] = o
	}
	return out
}

// cut offers every notification in turn and returns the answers.
func cut(t *testing.T, c *domain.BundleCutter, offers []offer) []bool {
	t.Helper()
	got := make([]bool, len(offers))
	for i, o := range offers {
		got[i] = c.Offer(o.bundling, o.weight)
		if c.Weight() < 0 {
			t.Fatalf("after offer %d (%+v) the weight is negative: %d", i, o, c.Weight())
		}
	}
	return got
}

func TestNewBundleCutterStartsEmptyAndOpen(t *testing.T) {
	c := domain.NewBundleCutter(domain.DefaultMaxBundleWeight)
	if c.Count() != 0 || c.Weight() != 0 || c.Closed() {
		t.Errorf("new cutter: count %d weight %d closed %v, want 0, 0, false", c.Count(), c.Weight(), c.Closed())
	}
}

func TestBundleCutterAppliesTheBundlingRule(t *testing.T) {
	tests := []struct {
		name       string
		max        int64
		offers     []offer
		wantTaken  int
		wantWeight int64
		wantClosed bool
	}{
		{"a first notification within the limit is taken", 10, []offer{b(3)}, 1, 3, false},
		{"a first notification over the limit is still taken", 10, []offer{b(11)}, 1, 11, false},
		{"a first notification over the limit takes nothing after it", 10, []offer{b(11), b(1)}, 1, 11, true},
		{"a huge first notification is taken under a limit of 1", 1, []offer{b(math.MaxInt32), b(1)}, 1, math.MaxInt32, true},
		{"a first notification without bundling is a bundle of its own", 10, []offer{nb(1)}, 1, 1, true},
		{"a first notification without bundling refuses a bundleable next", 10, []offer{nb(1), b(1)}, 1, 1, true},
		{"a first notification without bundling over the limit is alone", 10, []offer{nb(50), b(1)}, 1, 50, true},
		{"bundleable notifications are taken while they fit", 10, []offer{b(2), b(3), b(4)}, 3, 9, false},
		{"a total exactly at the limit fits", 10, []offer{b(4), b(6)}, 2, 10, false},
		{"one past the limit is refused", 10, []offer{b(4), b(7)}, 1, 4, true},
		{"a full bundle refuses even weight 1", 10, []offer{b(10), b(1)}, 1, 10, true},
		{"a next notification without bundling is refused", 10, []offer{b(1), nb(1)}, 1, 1, true},
		{"the first that fails ends the bundle and nothing is skipped", 10, []offer{b(1), b(20), b(1), b(1)}, 1, 1, true},
		{"a notification without bundling ends the bundle even if later ones fit", 100, []offer{b(1), b(1), nb(1), b(1)}, 2, 2, true},
		{"the default limit takes 51,200 notifications of weight 1", domain.DefaultMaxBundleWeight, repeatOffer(b(1), 51_201), 51_200, 51_200, true},
		{"maximum weights under the largest limit are all taken", math.MaxInt64, repeatOffer(b(math.MaxInt32), 1000), 1000, 1000 * math.MaxInt32, false},
		{"a first weight at the int64 limit refuses anything after it", math.MaxInt64, []offer{b(math.MaxInt64), b(1)}, 1, math.MaxInt64, true},
		{"a sum that would overflow int64 is refused", math.MaxInt64, []offer{b(math.MaxInt64 - 5), b(3), b(3)}, 2, math.MaxInt64 - 2, true},
		{"a sum that reaches int64 max exactly fits", math.MaxInt64, []offer{b(math.MaxInt64 - math.MaxInt32), b(math.MaxInt32), b(1)}, 2, math.MaxInt64, true},
		{"a first weight over a huge limit cannot overflow the check", math.MaxInt64 - 1, []offer{b(math.MaxInt64), b(math.MaxInt32)}, 1, math.MaxInt64, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := domain.NewBundleCutter(tt.max)
			answers := cut(t, c, tt.offers)
			for i, ok := range answers {
				if want := i < tt.wantTaken; ok != want {
					t.Fatalf("offer %d (%+v) answered %v, want %v (answers %v)", i, tt.offers[i], ok, want, summarize(answers))
				}
			}
			if c.Count() != tt.wantTaken {
				t.Errorf("Count() = %d, want %d", c.Count(), tt.wantTaken)
			}
			if c.Weight() != tt.wantWeight {
				t.Errorf("Weight() = %d, want %d", c.Weight(), tt.wantWeight)
			}
			if c.Closed() != tt.wantClosed {
				t.Errorf("Closed() = %v, want %v", c.Closed(), tt.wantClosed)
			}
		})
	}
}

// summarize keeps failure messages short for long offer lists.
func summarize(answers []bool) []bool {
	if len(answers) > 10 {
		return answers[:10]
	}
	return answers
}

func TestOnceRefusedABundleCutterRefusesEverything(t *testing.T) {
	tests := []struct {
		name  string
		close []offer
	}{
		{"after a weight refusal", []offer{b(9), b(2)}},
		{"after a non-bundleable refusal", []offer{b(1), nb(1)}},
		{"after a non-bundleable first", []offer{nb(1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := domain.NewBundleCutter(10)
			cut(t, c, tt.close)
			if !c.Closed() {
				t.Fatalf("cutter not closed after %+v", tt.close)
			}
			count, weight := c.Count(), c.Weight()
			for i, o := range []offer{b(1), nb(1), b(0), b(1), b(1)} {
				if c.Offer(o.bundling, o.weight) {
					t.Errorf("later offer %d (%+v) accepted by a closed cutter", i, o)
				}
				if !c.Closed() {
					t.Errorf("cutter reopened after later offer %d", i)
				}
			}
			if c.Count() != count || c.Weight() != weight {
				t.Errorf("refused offers changed the bundle: count %d→%d weight %d→%d", count, c.Count(), weight, c.Weight())
			}
		})
	}
}

func TestBundleCutterWeightIsTheSumOfTheTakenWeights(t *testing.T) {
	tests := []struct {
		name    string
		max     int64
		weights []int64
	}{
		{"small weights under the default limit", domain.DefaultMaxBundleWeight, []int64{1, 2, 3, 5, 8, 13, 21, 34, 55}},
		{"maximum weights under a huge limit", 1 << 40, []int64{math.MaxInt32, math.MaxInt32, math.MaxInt32, math.MaxInt32}},
		{"mixed weights until the limit is hit", 1000, []int64{400, 300, 299, 1, 1, 400}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := domain.NewBundleCutter(tt.max)
			var sum int64
			for _, w := range tt.weights {
				if c.Offer(true, w) {
					sum += w
				}
				if c.Weight() != sum {
					t.Fatalf("Weight() = %d, want the sum of taken weights %d", c.Weight(), sum)
				}
			}
			if c.Count() > 1 && c.Weight() > tt.max {
				t.Errorf("bundle of %d weighs %d, over the limit %d", c.Count(), c.Weight(), tt.max)
			}
		})
	}
}
