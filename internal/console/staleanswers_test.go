package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"
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
	got, err := chromedp.Run(b.ctx, chromedp.Evaluate[map[string]string](race, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	for _, outcome := range []string{"answer", "failure"} {
		if got[outcome] != "the later answer" {
			t.Errorf("after an earlier call's %s arrived last, the part shows %q; want the later answer", outcome, got[outcome])
		}
	}
	b.do("after the answers")
}
