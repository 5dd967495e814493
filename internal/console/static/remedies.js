// The confirmation of a remedy: a dialog that says what will happen, asks
// for the reason the audit log records (and any field the remedy needs),
// and calls the hub only when confirmed. The dialog stays open with the
// hub's answer when the call fails; another page closes it, and a refusal
// that comes after shows above the page.

import { APIError } from './api.js';
import { el, say } from './dom.js';

const dialog = document.getElementById('confirm');
const reason = document.getElementById('confirm-reason');
const ok = document.getElementById('confirm-ok');
const failure = document.getElementById('confirm-error');
const fieldsBox = document.getElementById('confirm-fields');
const maxReason = 500;

let current = null; // the remedy being confirmed

function inputs() {
  return [...fieldsBox.querySelectorAll('input')];
}

// complete says whether the remedy may be confirmed: a reason of 1 to
// maxReason characters, counted as the hub counts them (code points, not
// UTF-16 units), and every field as its pattern says.
function complete() {
  const length = [...reason.value.trim()].length;
  return length > 0 && length <= maxReason && inputs().every((i) => current.patterns[i.id].test(i.value.trim()));
}

// check enables the button when the remedy may be confirmed and is not
// under way already: an acknowledgement's calls take a while, and editing
// the reason meanwhile must not allow running it a second time alongside.
function check() {
  ok.disabled = current.busy || !complete();
}

// confirmRemedy opens the dialog for a remedy: title, what (the
// consequences), fields ([{id, label, value, pattern}]), action (the
// button's words), run(reason, values) resolving to the message to show,
// done() called after it succeeded (it refreshes the page the remedy was
// asked from: not when the operator is on another page by then), and about
// (what the remedy acts on, e.g. "Actor <id>"), which the notice names when
// the answer comes after the operator left the confirmation.
export function confirmRemedy({ title, what, fields = [], action, run, done, about }) {
  current = { run, done, about, page: location.hash, patterns: {}, busy: false };
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-what').textContent = what;
  fieldsBox.replaceChildren(...fields.flatMap((f) => {
    current.patterns[f.id] = f.pattern;
    return [el('label', { for: f.id }, f.label),
      el('input', { id: f.id, value: f.value || '', size: 38, autocomplete: 'off', required: true, oninput: check })];
  }));
  reason.value = '';
  failure.hidden = true;
  ok.textContent = action;
  check();
  dialog.showModal();
  (inputs().find((i) => !i.value) || reason).focus();
}

reason.addEventListener('input', check);
document.getElementById('confirm-cancel').addEventListener('click', () => dialog.close());
// A remedy acts on the actor of the page it was asked from: another page
// (Back, a link, the header's field) closes its confirmation, which would
// otherwise stand over the other actor's page. This module's listener runs
// before the page's, which shows the new page.
window.addEventListener('hashchange', () => dialog.close());
ok.addEventListener('click', async () => {
  if (current.busy || !complete()) {
    return;
  }
  const values = Object.fromEntries(inputs().map((i) => [i.id, i.value.trim()]));
  const remedy = current;
  remedy.busy = true;
  ok.disabled = true;
  // left says whether the operator left the confirmation (Cancel, another
  // page) while the hub had the call: the notice then shows above a page
  // that may be another actor's, and names what the remedy acted on.
  const left = () => current !== remedy || !dialog.open;
  const told = (text) => (left() ? `${remedy.about}: ${text}` : text);
  try {
    const message = await remedy.run(reason.value.trim(), values);
    say(told(message));
    if (!left()) {
      dialog.close();
    }
    if (location.hash === remedy.page) {
      remedy.done();
    }
  } catch (err) {
    remedy.busy = false;
    const text = err instanceof APIError ? err.describe() : err.message;
    if (left()) {
      say(told(text));
    } else {
      failure.textContent = text;
      failure.hidden = false;
      check();
    }
  }
});
