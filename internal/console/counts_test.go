package console_test

import (
	"maps"
	"testing"

	"github.com/chromedp/chromedp"
)

// The hub's 64-bit figures (JSON strings) are shown to the unit: a
// cabinet's waiting weight (up to 2^31-1 per notification) passes 2^53,
// where a JavaScript number no longer holds every integer.
func TestCountsShowEveryDigit(t *testing.T) {
	b := emptyConsole(t)
	const format = `(async () => {
		const { count, plural } = await import('/console/dom.js');
		return {
			big: count('9007199254740993'),
			max: count('9223372036854775807'),
			negative: count('-9007199254740993'),
			small: count('1234'),
			number: count(42),
			missing: count(undefined),
			empty: count(''),
			one: plural('1', 'bundle'),
			many: plural('9007199254740993', 'bundle'),
		};
	})()`
	got, err := chromedp.Run(b.ctx, chromedp.Evaluate[map[string]string](format, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"big":      "9,007,199,254,740,993",
		"max":      "9,223,372,036,854,775,807",
		"negative": "-9,007,199,254,740,993",
		"small":    "1,234",
		"number":   "42",
		"missing":  "0",
		"empty":    "0",
		"one":      "1 bundle",
		"many":     "9,007,199,254,740,993 bundles",
	}
	if !maps.Equal(got, want) {
		t.Errorf("counts %q, want %q", got, want)
	}
	b.do("after formatting")
}
