package console_test

import (
	"testing"
)

// A part of a page shows the answer of the last call made for it: an
// earlier call answered later (a page of the list, a peek group or an
// audit range the operator has since changed) does not replace it, nor
// does its failure.
func TestAnEarlierAnswerDoesNotReplaceALaterOne(t *testing.T) {
	b := emptyConsole(t)
	const race = `(async () => {
		const { filled } = await import('/console/console.js');
		const { el } = await import('/console/dom.js');
		const held = () => {
			let settle;
			const answer = new Promise((resolve, reject) => { settle = { resolve, reject }; });
			return { load: () => answer, settle };
		};
		const shown = {};
		for (const outcome of ['answer', 'failure']) {
			const node = el('div');
			const earlier = held();
			const later = held();
			const earlierDone = filled(node, earlier.load);
			const laterDone = filled(node, later.load);
			later.settle.resolve(el('p', {}, 'the later answer'));
			await laterDone;
			if (outcome === 'answer') {
				earlier.settle.resolve(el('p', {}, 'the earlier answer'));
			} else {
				earlier.settle.reject(new Error('the earlier call failed'));
			}
			await earlierDone;
			shown[outcome] = node.textContent;
		}
		return shown;
	})()`
	got := b.texts(race)
	for _, outcome := range []string{"answer", "failure"} {
		if got[outcome] != "the later answer" {
			t.Errorf("after an earlier call's %s arrived last, the part shows %q; want the later answer", outcome, got[outcome])
		}
	}
	b.do("after the answers")
}

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
	b.wantTexts("counts", format, map[string]string{
		"big":      "9,007,199,254,740,993",
		"max":      "9,223,372,036,854,775,807",
		"negative": "-9,007,199,254,740,993",
		"small":    "1,234",
		"number":   "42",
		"missing":  "0",
		"empty":    "0",
		"one":      "1 bundle",
		"many":     "9,007,199,254,740,993 bundles",
	})
	b.do("after formatting")
}

// An enum value the console's hub does not know (an audit action written
// by a newer hub into the store they share, during an upgrade) comes as
// its number: the page shows the number, and the rest of its table.
func TestAnUnknownEnumValueShowsItsNumber(t *testing.T) {
	b := emptyConsole(t)
	const labels = `(async () => {
		const { label, domainLabel } = await import('/console/dom.js');
		return { known: label('AUDIT_ACTION_RELEASE_BUNDLE', 'AUDIT_ACTION_'), unknown: label(7, 'AUDIT_ACTION_'), domain: domainLabel(9), none: label('', 'X_') };
	})()`
	b.wantTexts("labels", labels, map[string]string{"known": "release bundle", "unknown": "7", "domain": "9", "none": "—"})
	b.do("after the labels")
}
