// Building the page: elements from data (text only, never markup), and the
// formats of the figures.

// el makes an element: attrs are attributes (on* are listeners), children
// strings or nodes (null and false are left out).
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) {
      continue;
    }
    if (key.startsWith('on')) {
      node.addEventListener(key.slice(2), value);
    } else {
      node.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child !== undefined && child !== null && child !== false) {
      node.append(child instanceof Node ? child : String(child));
    }
  }
}

// say shows a message above the page until the next page is shown.
export function say(text) {
  const notice = document.getElementById('notice');
  notice.textContent = text;
  notice.hidden = false;
}

// table makes a table of rows (arrays of cells) under headings; a heading
// starting with '#' is a right-aligned number column.
export function table(id, headings, rows, empty) {
  if (rows.length === 0) {
    return el('p', { id, class: 'muted' }, empty);
  }
  const numeric = headings.map((h) => h.startsWith('#'));
  return el('table', { id },
    el('thead', {}, el('tr', {}, headings.map((h, i) =>
      el('th', { class: numeric[i] ? 'num' : null }, numeric[i] ? h.slice(1) : h)))),
    el('tbody', {}, rows.map((row) => el('tr', {}, row.map((cell, i) =>
      el('td', { class: numeric[i] ? 'num' : null }, cell))))));
}

// section is a titled part of a page.
export function section(id, title, ...children) {
  return el('section', { id }, el('h2', {}, title), ...children);
}

// The hub's int64 fields are JSON strings; times and the figures a page
// computes with (compares, plots) fit a number.
export const num = (value) => Number(value || 0);

// count shows a figure to the unit: an integer string as a BigInt, since a
// number past 2^53 (a cabinet's waiting weight can be) loses its last digits.
export function count(value) {
  if (typeof value === 'string' && /^-?\d+$/.test(value)) {
    return BigInt(value).toLocaleString('en');
  }
  return num(value).toLocaleString('en');
}

// plural is a count and its noun: 1 notification, 2 notifications.
export function plural(value, noun) {
  return `${count(value)} ${num(value) === 1 ? noun : `${noun}s`}`;
}

// age is how long ago ms was, in the two largest units.
export function age(ms, now = Date.now()) {
  return duration(Math.max(0, (now - num(ms)) / 1000));
}

export function duration(seconds) {
  let s = Math.round(seconds);
  if (s < 60) {
    return `${s} s`;
  }
  const units = [['d', 86400], ['h', 3600], ['min', 60]];
  const parts = [];
  for (const [name, size] of units) {
    if (s >= size && parts.length < 2) {
      parts.push(`${Math.floor(s / size)} ${name}`);
      s %= size;
    } else if (parts.length > 0) {
      break;
    }
  }
  return parts.join(' ');
}

// when is a time in UTC with its age, or an em dash when not known (0).
export function when(ms) {
  if (!num(ms)) {
    return '—';
  }
  const t = new Date(num(ms)).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
  return `${t} (${age(ms)} ago)`;
}

// label turns an enum name into words: DOMAIN_TIME_SERIES -> time series.
// A value the hub's build does not name (written into the store by a newer
// hub) comes as its number, which is shown as it is.
export function label(name, prefix) {
  if (!name) {
    return '—';
  }
  if (typeof name !== 'string') {
    return String(name);
  }
  return name.replace(prefix, '').toLowerCase().replaceAll('_', ' ');
}

export const domainLabel = (name) => label(name, 'DOMAIN_');
export const groupLabel = (name) => label(name, 'PEEK_GROUP_');
