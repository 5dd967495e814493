// The backlog history as two small line charts drawn in SVG: notifications
// waiting per domain, and the age of each domain's oldest waiting one.

import { el, domainLabel, num } from './dom.js';

const svgNS = 'http://www.w3.org/2000/svg';

// Fixed colours per domain, so a domain keeps its colour between charts
// and visits.
const colours = {
  DOMAIN_TIME_SERIES: '#1f77b4',
  DOMAIN_CHARGES: '#ff7f0e',
  DOMAIN_MARKET_ROLES: '#2ca02c',
  DOMAIN_METERING_POINTS: '#d62728',
  DOMAIN_AGGREGATIONS: '#9467bd',
};

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(svgNS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    node.setAttribute(key, String(value));
  }
  node.append(...children);
  return node;
}

// scale is a chart's top, at least least, rounded up to 1, 2 or 5 times a
// power of ten, and the step of its grid lines (a fifth, or a quarter of 2).
function scale(value, least) {
  const v = Math.max(value, least);
  const power = 10 ** Math.floor(Math.log10(v));
  for (const [m, lines] of [[1, 5], [2, 4], [5, 5], [10, 5]]) {
    if (m * power >= v) {
      return { top: m * power, step: (m * power) / lines };
    }
  }
  return { top: 10 * power, step: 2 * power };
}

const hhmm = (ms) => new Date(ms).toISOString().slice(11, 16);

// chart draws series ({domain, points: [[ms, value]]}) over [from, to].
function chart(title, series, from, to) {
  const width = 560;
  const height = 200;
  const left = 64;
  const right = 18;
  const top = 22;
  const bottom = 26;
  const { top: yMax, step: yStep } = scale(Math.max(0, ...series.flatMap((s) => s.points.map((p) => p[1]))), 5);
  const x = (ms) => left + ((ms - from) / Math.max(1, to - from)) * (width - left - right);
  const y = (v) => height - bottom - (v / yMax) * (height - top - bottom);
  const root = svg('svg', { class: 'plot', viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': title });
  root.append(svg('text', { class: 'title', x: left, y: 14 }, title));
  for (let v = 0; v <= yMax; v += yStep) {
    root.append(svg('line', { class: 'grid', x1: left, x2: width - right, y1: y(v), y2: y(v) }));
    root.append(svg('text', { x: left - 6, y: y(v) + 4, 'text-anchor': 'end' }, v.toLocaleString('en')));
  }
  const span = (to - from) / 60000;
  const stepMinutes = [5, 10, 15, 30, 60, 120, 240].find((m) => span / m <= 6) || 360;
  const step = stepMinutes * 60000;
  for (let t = Math.ceil(from / step) * step; t <= to; t += step) {
    root.append(svg('line', { class: 'axis', x1: x(t), x2: x(t), y1: height - bottom, y2: height - bottom + 4 }));
    root.append(svg('text', { x: x(t), y: height - 8, 'text-anchor': 'middle' }, hhmm(t)));
  }
  root.append(svg('line', { class: 'axis', x1: left, x2: width - right, y1: height - bottom, y2: height - bottom }));
  for (const s of series) {
    const colour = colours[s.domain] || '#555';
    const points = s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
    root.append(svg('polyline', { points, stroke: colour }));
    for (const [t, v] of s.points) {
      root.append(svg('circle', { cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2.5, fill: colour }));
    }
  }
  return root;
}

// historyPlot draws the samples of GetBacklogHistory (oldest first) over
// the last minutes.
export function historyPlot(samples, minutes, now = Date.now()) {
  const from = now - minutes * 60000;
  const byDomain = new Map();
  for (const sample of samples) {
    for (const d of sample.domains || []) {
      if (!byDomain.has(d.domain)) {
        byDomain.set(d.domain, { waiting: [], oldest: [] });
      }
      const at = num(sample.atMs);
      byDomain.get(d.domain).waiting.push([at, num(d.waiting)]);
      byDomain.get(d.domain).oldest.push([at, num(d.oldestAgeSeconds)]);
    }
  }
  if (byDomain.size === 0) {
    return el('p', { id: 'history-empty', class: 'muted' }, `No backlog recorded in the last ${minutes} minutes.`);
  }
  const domains = [...byDomain.keys()].sort();
  const waiting = domains.map((domain) => ({ domain, points: byDomain.get(domain).waiting }));
  // Ages in hours once one passes two, else in minutes.
  const maxAge = Math.max(...domains.flatMap((domain) => byDomain.get(domain).oldest.map((p) => p[1])));
  const [unit, seconds] = maxAge >= 2 * 3600 ? ['hours', 3600] : ['minutes', 60];
  const oldest = domains.map((domain) => ({
    domain, points: byDomain.get(domain).oldest.map(([t, v]) => [t, v / seconds]),
  }));
  const legend = el('p', { class: 'legend' }, domains.map((domain) => el('span', { class: 'key' },
    svg('svg', { width: 12, height: 12, viewBox: '0 0 12 12' }, svg('rect', { width: 12, height: 12, fill: colours[domain] || '#555' })),
    ` ${domainLabel(domain)}`)));
  return el('div', { id: 'history-plot' },
    chart('Notifications waiting, per domain', waiting, from, now),
    chart(`Age of the oldest waiting notification (${unit}), per domain`, oldest, from, now),
    legend);
}
