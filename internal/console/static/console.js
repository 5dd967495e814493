// The console: a page per hash route (#/, #/actor/<recipient>,
// #/actor/<recipient>/notification/<id>), drawn from the Admin routes each
// time it is shown. A call the hub refuses or does not implement shows its
// message where its figures would be; the rest of the page still works.

import { admin, APIError, setToken, token } from './api.js';
import { age, count, domainLabel, el, groupLabel, label, plural, section, table, when } from './dom.js';
import { historyPlot } from './plot.js';
import { confirmRemedy } from './remedies.js';

const main = document.getElementById('main');
const notice = document.getElementById('notice');
const historyMinutes = 180;
const recipientsPageSize = 50;
const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

// problem shows what a failed call says, in place of what it would show.
function problem(err) {
  if (err instanceof APIError) {
    return el('p', { class: err.status === 501 ? 'unavailable' : 'error' }, err.describe());
  }
  return el('p', { class: 'error' }, `The console failed: ${err.message}`);
}

// latest is the last load started for each node that filled fills.
const latest = new WeakMap();

// filled replaces node's content with what load resolves to, or the
// problem it met, unless a later load for node started meanwhile (the
// operator changed the group, the page or the range): the answers may
// come back in any order, and the node shows the last one asked for.
// Until then it says it is loading: what it showed answered another
// question (the group, page or range before).
export async function filled(node, load) {
  const ticket = {};
  latest.set(node, ticket);
  node.replaceChildren(loading());
  let content;
  try {
    content = await load();
  } catch (err) {
    content = problem(err);
  }
  if (latest.get(node) === ticket) {
    node.replaceChildren(content);
  }
}

// pageButtons are the Previous and Next buttons of a paged list; pages
// holds the page tokens up to the page shown ('' for the first), and show
// shows the page of the last. Each button sets the tokens as of the page it
// is on: a second click before the next page is shown asks for that same
// page again, not for one further.
function pageButtons(pages, next, show) {
  const depth = pages.length;
  return [
    previousButton(pages, show),
    el('button', { type: 'button', disabled: !next, onclick: () => { pages.length = depth; pages.push(next); show(); } }, 'Next page'),
  ];
}

function previousButton(pages, show) {
  const depth = pages.length;
  return el('button', { type: 'button', disabled: depth === 1, onclick: () => { pages.length = depth - 1; show(); } }, 'Previous page');
}

// pageProblem is a page of a list whose call failed: the problem, and the
// buttons to go back to the page before or ask for this one again, so
// that the list stays usable.
function pageProblem(err, pages, show) {
  const depth = pages.length;
  return el('div', {}, problem(err), el('p', { class: 'toolbar' },
    previousButton(pages, show),
    el('button', { type: 'button', onclick: () => { pages.length = depth; show(); } }, 'Try again')));
}

const loading = () => el('p', { class: 'muted' }, 'Loading…');

function placeholder(id) {
  return el('div', { id }, loading());
}

const actorLink = (recipient) => el('a', { href: `#/actor/${recipient}`, class: 'mono' }, recipient);
const traceLink = (recipient, id) => el('a', { href: `#/actor/${recipient}/notification/${id}`, class: 'mono' }, id);

// The backlog overview: recipients with a backlog, and the history plot.
function overview() {
  const list = placeholder('recipients');
  const history = placeholder('history');
  let order = 'RECIPIENT_ORDER_OLDEST';
  const pages = ['']; // page tokens of the pages seen, for going back
  const showPage = () => filled(list, async () => {
    let answer;
    try {
      answer = await admin.listRecipients(order, recipientsPageSize, pages[pages.length - 1]);
    } catch (err) {
      return pageProblem(err, pages, showPage);
    }
    const rows = (answer.recipients || []).map((r) => [
      actorLink(r.recipient), count(r.waiting), when(r.oldestWaitingSavedAtMs), count(r.pendingBundles),
    ]);
    const next = answer.nextPageToken;
    return el('div', {},
      table('recipients-table', ['Actor', '#Waiting', 'Oldest waiting since', '#Pending bundles'], rows,
        'No recipient has a backlog.'),
      el('p', { class: 'toolbar' },
        pageButtons(pages, next, showPage),
        el('span', { class: 'muted' }, `Figures computed ${when(answer.computedAtMs)}.`)));
  });
  const orderSelect = el('select', {
    id: 'recipients-order',
    onchange: (e) => { order = e.target.value; pages.length = 1; showPage(); },
  }, el('option', { value: 'RECIPIENT_ORDER_OLDEST' }, 'oldest waiting first'),
  el('option', { value: 'RECIPIENT_ORDER_SIZE' }, 'most waiting first'));
  showPage();
  filled(history, async () => historyPlot((await admin.backlogHistory(historyMinutes)).samples || [], historyMinutes));
  return [
    el('h1', {}, 'Backlog'),
    section('backlog-history', `Backlog per domain, last ${historyMinutes / 60} hours (times in UTC)`, history),
    section('recipients-section', 'Actors with a backlog',
      el('p', { class: 'toolbar' }, el('label', { for: 'recipients-order' }, 'Order'), orderSelect), list),
  ];
}

// An actor's page: cabinets, pending bundles, the next bundle, a trace
// form and the audit log; the remedies start from its rows.
function actor(recipient) {
  const backlog = placeholder('backlog');
  const preview = placeholder('preview');
  const audit = placeholder('audit');
  const refresh = () => show();

  filled(backlog, async () => {
    const b = await admin.backlog(recipient);
    const cabinets = (b.cabinets || []).map((c) => [
      domainLabel(c.domain), el('span', { class: 'mono' }, c.contentType), count(c.waiting), count(c.inPendingBundle),
      c.weightPartial ? `≥ ${count(c.waitingWeight)}` : count(c.waitingWeight), when(c.oldestWaitingSavedAtMs), `${count(c.acknowledgedPositions)} / ${count(c.totalPositions)}`,
      el('button', {
        type: 'button', class: 'danger',
        onclick: () => acknowledge(recipient, c.domain, c.contentType, '', refresh),
      }, 'Acknowledge…'),
    ]);
    const pending = (b.pendingBundles || []).map((p) => [
      el('span', { class: 'mono' }, p.bundleId), groupLabel(p.group), domainLabel(p.domain),
      el('span', { class: 'mono' }, p.contentType), count(p.notificationCount), count(p.weight), when(p.createdAtMs),
      `${count(p.startPosition)}–${count(p.endPosition)}`,
      el('button', { type: 'button', class: 'danger', onclick: () => release(recipient, p, refresh) }, 'Release…'),
    ]);
    // The hub lists the oldest cabinets only (1,000): say how many there are.
    const more = (b.cabinetCount || 0) > cabinets.length
      ? el('p', { id: 'cabinets-more', class: 'muted' },
        `The oldest ${count(cabinets.length)} of ${count(b.cabinetCount)} cabinets with a backlog are listed.`)
      : null;
    return el('div', {},
      el('h3', {}, 'Cabinets'),
      table('cabinets', ['Domain', 'Content type', '#Waiting', '#In a pending bundle', '#Weight', 'Oldest waiting since',
        'Acknowledged / handed out', ''], cabinets, 'Nothing waiting: the actor has no backlog.'),
      more,
      el('h3', {}, 'Pending bundles'),
      table('pending-bundles', ['Bundle', 'Peek group', 'Domain', 'Content type', '#Notifications', '#Weight',
        'Created', 'Positions', ''], pending, 'No bundle is pending.'));
  });

  const group = el('select', { id: 'preview-group', onchange: () => showPreview() },
    ['PEEK_GROUP_ALL', 'PEEK_GROUP_TIME_SERIES', 'PEEK_GROUP_AGGREGATIONS', 'PEEK_GROUP_MASTER_DATA']
      .map((g) => el('option', { value: g }, groupLabel(g))));
  const showPreview = () => filled(preview, async () => {
    const b = (await admin.nextBundle(recipient, group.value)).bundle;
    if (!b) {
      return el('p', { id: 'preview-result', class: 'muted' }, 'The next Peek of this group would find nothing.');
    }
    const what = b.pending
      ? `Bundle ${b.bundleId} is pending (created ${when(b.createdAtMs)}): the next Peek returns it again.`
      : 'No bundle is pending: the next Peek would cut this one now.';
    return el('div', { id: 'preview-result' },
      el('p', {}, what),
      el('dl', { class: 'fields' },
        el('dt', {}, 'Domain'), el('dd', {}, domainLabel(b.domain)),
        el('dt', {}, 'Content type'), el('dd', { class: 'mono' }, b.contentType),
        el('dt', {}, 'Notifications'), el('dd', {}, count(b.notificationCount)),
        el('dt', {}, 'Weight'), el('dd', {}, count(b.weight)),
        el('dt', {}, 'Document types'), el('dd', {}, (b.documentTypes || []).join(', ') || '—'),
        el('dt', {}, 'Positions'), el('dd', {}, `${count(b.startPosition)}–${count(b.endPosition)}`)),
      el('ul', { class: 'ids' }, (b.notificationIds || []).map((id) => el('li', {}, traceLink(recipient, id)))));
  });
  showPreview();

  const traceInput = el('input', { id: 'trace-id', placeholder: 'notification UUID', size: 38, autocomplete: 'off', required: true });
  const traceForm = el('form', {
    id: 'trace-form', class: 'toolbar',
    onsubmit: (e) => {
      e.preventDefault();
      location.hash = `#/actor/${recipient}/notification/${traceInput.value.trim()}`;
    },
  }, el('label', { for: 'trace-id' }, 'Notification'), traceInput, el('button', {}, 'Trace'));

  const dayAgo = Date.now() - 24 * 3600 * 1000;
  const from = el('input', { id: 'audit-from', type: 'datetime-local', value: localInput(dayAgo) });
  const to = el('input', { id: 'audit-to', type: 'datetime-local' });
  const auditPages = [''];
  // The range shown, as of the last Show: the page tokens go on in it,
  // whatever the inputs hold since.
  let auditRange = {};
  const showRange = () => { auditRange = { from: inputMs(from.value), to: inputMs(to.value) }; };
  const showAudit = () => filled(audit, async () => {
    let answer;
    try {
      answer = await admin.audit(recipient, auditRange.from, auditRange.to, auditPages[auditPages.length - 1]);
    } catch (err) {
      return pageProblem(err, auditPages, showAudit);
    }
    const rows = (answer.events || []).map((e) => [
      when(e.atMs), label(e.action, 'AUDIT_ACTION_'), e.subject, e.bundleId ? el('span', { class: 'mono' }, e.bundleId) : '—', e.detail || '',
    ]);
    const next = answer.nextPageToken;
    return el('div', {},
      table('audit-table', ['When', 'Action', 'Who', 'Bundle', 'Detail'], rows, 'No event in this time range.'),
      el('p', { class: 'toolbar' },
        pageButtons(auditPages, next, showAudit)));
  });
  const auditForm = el('form', {
    id: 'audit-form', class: 'toolbar',
    onsubmit: (e) => { e.preventDefault(); auditPages.length = 1; showRange(); showAudit(); },
  }, el('label', { for: 'audit-from' }, 'From'), from, el('label', { for: 'audit-to' }, 'to'), to,
  el('span', { class: 'muted' }, '(local time; empty: now)'), el('button', {}, 'Show'));
  showRange();
  showAudit();

  return [
    el('h1', {}, 'Actor ', el('span', { class: 'mono', id: 'actor-recipient' }, recipient)),
    el('p', { class: 'toolbar' }, el('button', { type: 'button', id: 'refresh', onclick: refresh }, 'Refresh')),
    section('backlog-section', 'Backlog', backlog),
    section('preview-section', 'Next bundle (nothing is created)',
      el('p', { class: 'toolbar' }, el('label', { for: 'preview-group' }, 'Peek group'), group), preview),
    section('trace-section', 'Where is a notification?', traceForm),
    section('audit-section', 'Audit log', auditForm, audit),
  ];
}

// localInput and inputMs convert between unix ms and a datetime-local
// input's value (local time, to the minute); an empty input is 0.
function localInput(ms) {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 16);
}

function inputMs(value) {
  return value ? new Date(value).getTime() : 0;
}

const traceStates = {
  NOTIFICATION_STATE_NOT_FOUND: 'Not found: never saved, or removed by retention.',
  NOTIFICATION_STATE_OTHER_RECIPIENT_OR_REMOVED: 'Stored, but not for this actor: saved for another recipient, or being removed by retention.',
  NOTIFICATION_STATE_WAITING: 'Waiting: saved, in no bundle yet.',
  NOTIFICATION_STATE_PENDING: 'Pending: in a bundle the actor peeked and has not dequeued.',
  NOTIFICATION_STATE_DEQUEUED: 'Dequeued: the actor has acknowledged it.',
};

// The notification trace: where one notification of the actor is.
function notification(recipient, id) {
  const result = placeholder('trace');
  filled(result, async () => {
    const t = await admin.trace(recipient, id);
    const located = ['NOTIFICATION_STATE_WAITING', 'NOTIFICATION_STATE_PENDING', 'NOTIFICATION_STATE_DEQUEUED'].includes(t.state);
    const open = ['NOTIFICATION_STATE_WAITING', 'NOTIFICATION_STATE_PENDING'].includes(t.state);
    return el('div', {},
      el('p', { class: 'state', id: 'trace-state' }, traceStates[t.state] || t.state),
      located && el('dl', { class: 'fields' },
        el('dt', {}, 'Cabinet'), el('dd', {}, `${domainLabel(t.domain)}, `, el('span', { class: 'mono' }, t.contentType)),
        el('dt', {}, 'Position'), el('dd', {}, count(t.position)),
        el('dt', {}, 'Saved'), el('dd', {}, when(t.savedAtMs)),
        el('dt', {}, 'Bundle'), el('dd', { class: 'mono', id: 'trace-bundle' }, t.bundleId || '—'),
        el('dt', {}, 'Bundle created (first peeked)'), el('dd', {}, when(t.bundleCreatedAtMs)),
        el('dt', {}, 'Dequeued'), el('dd', {}, when(t.dequeuedAtMs))),
      open && el('p', { class: 'toolbar' }, el('button', {
        type: 'button', class: 'danger',
        onclick: () => acknowledge(recipient, t.domain, t.contentType, id, () => show()),
      }, 'Acknowledge up to here…')));
  });
  return [
    el('h1', {}, 'Notification ', el('span', { class: 'mono' }, id)),
    el('p', {}, 'Of actor ', actorLink(recipient)),
    section('trace-section', 'Where it is', result),
  ];
}

// release asks to confirm releasing a pending bundle, with a reason.
function release(recipient, bundle, done) {
  confirmRemedy({
    title: 'Release a pending bundle',
    what: `Bundle ${bundle.bundleId} (${plural(bundle.notificationCount, 'notification')} of ${domainLabel(bundle.domain)}, ` +
      `peeked ${age(bundle.createdAtMs)} ago) is given up: the actor's next Peek of the ${groupLabel(bundle.group)} ` +
      'group cuts a bundle afresh, and a Dequeue of this id fails.',
    action: 'Release the bundle',
    run: async (reason) => {
      await admin.releaseBundle(recipient, bundle.bundleId, reason);
      return `Released bundle ${bundle.bundleId}.`;
    },
    done,
    about: `Actor ${recipient}`,
  });
}

// maxBundlesNamed bounds the bundle ids an acknowledgement's notice lists.
const maxBundlesNamed = 10;

// acknowledge asks to confirm acknowledging a cabinet up to a notification
// on the actor's behalf, with a reason.
function acknowledge(recipient, domain, contentType, upTo, done) {
  confirmRemedy({
    title: 'Acknowledge on the actor\'s behalf',
    what: `Every notification of the cabinet ${domainLabel(domain)}, ${contentType} up to and including the one named ` +
      'below is dequeued as if the actor had dequeued it; the domain gets its dequeue notices. This cannot be undone.',
    fields: [{ id: 'confirm-up-to', label: 'Up to and including notification (UUID)', value: upTo, pattern: uuidPattern }],
    action: 'Acknowledge',
    run: async (reason, fields) => {
      // The hub dequeues a bounded number of bundles a call and says when
      // more remain: call again until none do. What a call dequeued stays
      // dequeued, whatever a later call does.
      let notifications = 0;
      let bundles = 0;
      const named = []; // the first bundles' ids, for the notice
      for (let more = true; more;) {
        let answer;
        try {
          answer = await admin.acknowledge(recipient, domain, contentType, fields['confirm-up-to'], reason);
        } catch (err) {
          if (!bundles) throw err;
          throw new Error(`${err instanceof APIError ? err.describe() : err.message} Before that, ` +
            `${plural(notifications, 'notification')} were acknowledged in ${plural(bundles, 'bundle')}; ` +
            'acknowledge again to go on from there.');
        }
        const ids = answer.bundleIds || [];
        notifications += Number(answer.notifications || 0);
        bundles += ids.length;
        named.push(...ids.slice(0, maxBundlesNamed + 1 - named.length));
        more = Boolean(answer.more);
        if (more && !ids.length) throw new Error('AcknowledgeOnBehalf dequeued nothing and says more remain.');
      }
      if (!bundles) return 'Nothing to acknowledge: the notification is dequeued already.';
      const which = bundles <= maxBundlesNamed ? ` (${named.join(', ')})` : '; the audit log names each bundle';
      return `Acknowledged ${plural(notifications, 'notification')} in ${plural(bundles, 'bundle')} ` +
        `on the actor's behalf${which}.`;
    },
    done,
    about: `Actor ${recipient}`,
  });
}

// decoded is a part of the address as typed: a stray % is left as it is
// (the hub then says what is wrong with the id).
function decoded(part) {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decoded);
  if (parts[0] === 'actor' && parts[1]) {
    if (parts[2] === 'notification' && parts[3]) {
      return notification(parts[1], parts[3]);
    }
    return actor(parts[1]);
  }
  return overview();
}

function show() {
  main.replaceChildren(...route());
}

function showTokenState() {
  document.getElementById('token-state').textContent = token()
    ? 'token set for this tab'
    : 'no token (enough with --auth none on loopback)';
}

document.getElementById('open-actor').addEventListener('submit', (e) => {
  e.preventDefault();
  const recipient = e.target.elements.recipient.value.trim();
  location.hash = `#/actor/${recipient}`;
});
document.getElementById('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const input = document.getElementById('token');
  setToken(input.value.trim());
  input.value = '';
  showTokenState();
  show();
});
document.getElementById('forget-token').addEventListener('click', () => {
  setToken('');
  showTokenState();
  show();
});
window.addEventListener('hashchange', () => {
  notice.hidden = true;
  show();
});
showTokenState();
show();
