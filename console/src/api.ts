// The one way the console talks to memgate: same-origin fetch with the session cookie, the CSRF
// header on every call (API.md §2) and the tenant picked in the header bar. Errors arrive in
// Anthropic's shape and become `ApiError`s that screens show as they are.

export interface Problem {
  path: string;
  kind: string;
  message: string;
}

export class ApiError extends Error {
  status: number;
  type: string;
  code?: string;
  problems?: Problem[];
  detail: Record<string, unknown>;

  constructor(status: number, type: string, message: string, detail: Record<string, unknown> = {}) {
    super(message);
    this.status = status;
    this.type = type;
    this.code = typeof detail.code === 'string' ? detail.code : undefined;
    this.problems = Array.isArray(detail.problems) ? (detail.problems as Problem[]) : undefined;
    this.detail = detail;
  }
}

/** Where memgate is: the path in front of `/console/`, so a path-rewriting proxy still works. */
export const root = location.pathname.replace(/\/console(\/.*)?$/, '');

let tenant = localStorage.getItem('memgate.tenant') || 'default';
let onSessionEnded: () => void = () => {};

export function currentTenant(): string {
  return tenant;
}

export function setTenant(name: string): void {
  tenant = name;
  localStorage.setItem('memgate.tenant', name);
}

export function whenSessionEnds(handler: () => void): void {
  onSessionEnded = handler;
}

type Query = Record<string, string | number | boolean | null | undefined>;

export interface CallOptions {
  query?: Query;
  body?: unknown;
  /** Sent as is (e.g. JSON Lines), with this content type. */
  text?: { body: string; type: string };
  headers?: Record<string, string>;
  /** Answer as text instead of JSON. */
  asText?: boolean;
}

export function queryString(query: Query = {}): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== null && v !== '') params.set(k, String(v));
  }
  const s = params.toString();
  return s ? `?${s}` : '';
}

export async function call<T>(method: string, path: string, options: CallOptions = {}): Promise<T> {
  const headers: Record<string, string> = {
    'X-Memgate-Console': '1',
    'X-Memory-Tenant': tenant,
    Accept: options.asText ? '*/*' : 'application/json',
    ...options.headers,
  };
  let body: string | undefined;
  if (options.text) {
    body = options.text.body;
    headers['Content-Type'] = options.text.type;
  } else if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers['Content-Type'] = 'application/json';
  }
  const url = path.startsWith('/console/') ? `${root}${path}` : `${root}/admin/v1${path}${queryString(options.query)}`;
  let response: Response;
  try {
    response = await fetch(url, { method, headers, body, credentials: 'same-origin', cache: 'no-store' });
  } catch {
    throw new ApiError(0, 'network_error', 'memgate did not answer; is it running, and is this the right address?');
  }
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  if (!response.ok) {
    let parsed: { error?: { type?: string; message?: string } & Record<string, unknown> } | undefined;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    const e = parsed?.error;
    const err = new ApiError(response.status, e?.type ?? 'api_error', e?.message ?? `memgate answered ${response.status}`, e ?? {});
    if (response.status === 401 && !path.startsWith('/console/session')) onSessionEnded();
    throw err;
  }
  if (options.asText) return text as T;
  return (text ? JSON.parse(text) : undefined) as T;
}

export const get = <T>(path: string, query?: Query) => call<T>('GET', path, { query });
export const post = <T>(path: string, body?: unknown, query?: Query) => call<T>('POST', path, { body, query });
