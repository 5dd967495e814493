// The Admin routes of the hub (/admin/v1, grpc-gateway JSON: lowerCamelCase
// fields, enums by name, 64-bit integers as strings), called with the
// operator's bearer token. The token is kept for the browser tab only
// (sessionStorage) and sent to the hub only.

const tokenKey = 'messagehub.console.token';

export function token() {
  return sessionStorage.getItem(tokenKey) || '';
}

export function setToken(value) {
  if (value) {
    sessionStorage.setItem(tokenKey, value);
  } else {
    sessionStorage.removeItem(tokenKey);
  }
}

// APIError is a call the hub refused or did not answer; status is the HTTP
// status (0: no answer).
export class APIError extends Error {
  constructor(method, status, message) {
    super(message);
    this.method = method;
    this.status = status;
  }

  // describe says what went wrong in words an operator can act on.
  describe() {
    switch (this.status) {
      case 0:
        return `${this.method}: the hub did not answer (${this.message}).`;
      case 401:
        return `${this.method}: the hub refused the token (401: ${this.message}). Enter an admin token above.`;
      case 403:
        return `${this.method}: the token may not call this (403: ${this.message}); it needs the admin role.`;
      case 501:
        return `${this.method} is not available on this hub: it is not implemented (501).`;
      default:
        return `${this.method} failed (${this.status}): ${this.message}`;
    }
  }
}

async function call(method, verb, path, body) {
  const headers = { Accept: 'application/json' };
  const bearer = token();
  if (bearer) {
    headers.Authorization = `Bearer ${bearer}`;
  }
  const init = { method: verb, headers, cache: 'no-store', credentials: 'omit' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (err) {
    throw new APIError(method, 0, err.message);
  }
  const text = await resp.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : {};
  } catch {
    // Not JSON: a proxy's page, say; its text is the message.
  }
  if (!resp.ok) {
    throw new APIError(method, resp.status, (json && json.message) || text || resp.statusText);
  }
  return json || {};
}

function query(params) {
  const q = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') {
      q.set(key, String(value));
    }
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

const recipientPath = (recipient) => `/admin/v1/recipients/${encodeURIComponent(recipient)}`;

export const admin = {
  listRecipients: (order, pageSize, pageToken) =>
    call('ListRecipients', 'GET', `/admin/v1/recipients${query({ order, page_size: pageSize, page_token: pageToken })}`),
  backlogHistory: (minutes) =>
    call('GetBacklogHistory', 'GET', `/admin/v1/backlog-history${query({ minutes })}`),
  backlog: (recipient) =>
    call('GetBacklog', 'GET', `${recipientPath(recipient)}/backlog`),
  nextBundle: (recipient, group) =>
    call('PreviewNextBundle', 'GET', `${recipientPath(recipient)}/next-bundle${query({ group })}`),
  trace: (recipient, id) =>
    call('TraceNotification', 'GET', `${recipientPath(recipient)}/notifications/${encodeURIComponent(id)}`),
  audit: (recipient, fromMs, toMs, pageToken) =>
    call('ListAuditEvents', 'GET', `${recipientPath(recipient)}/audit${query({ from_ms: fromMs, to_ms: toMs, page_token: pageToken })}`),
  releaseBundle: (recipient, bundleId, reason) =>
    call('ReleaseBundle', 'POST', `${recipientPath(recipient)}/bundles/${encodeURIComponent(bundleId)}:release`, { reason }),
  acknowledge: (recipient, domain, contentType, upToNotificationId, reason) =>
    call('AcknowledgeOnBehalf', 'POST', `${recipientPath(recipient)}:acknowledge`,
      { domain, contentType, upToNotificationId, reason }),
};
