#!/usr/bin/env node
// A stand-in for memgate's admin API and console endpoints, exactly as console/API.md describes
// them, with canned, stateful data: the console can be developed and tested without the Rust side.
// Plain Node, no dependencies.
//
//   node dev/mock-api.mjs            # http://127.0.0.1:8788, serves dist/ at /console/ too
//
// Environment: MOCK_PORT (8788), MOCK_HOST (127.0.0.1), MEMGATE_ADMIN_TOKEN (dev-admin-token),
// MEMGATE_ADMIN_VIEWER_TOKEN (dev-viewer-token), MOCK_DIST (../dist), MOCK_TRAFFIC (1; 0 stops the
// simulated traffic).

import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { checkEnvelope, mergePatch, isValidScope, validateSchema } from './mock/validate.mjs';
import { seedRecords, seedAcmeRecords, seedKeys, seedReleases, queryPool, messagesBody, iso } from './mock/data.mjs';
import { MetricsStore } from './mock/metrics.mjs';
import { explain } from './mock/funnel.mjs';
import { hash01, random } from './mock/random.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const PORT = Number(process.env.MOCK_PORT ?? 8788);
const HOST = process.env.MOCK_HOST ?? '127.0.0.1';
const ADMIN_TOKEN = process.env.MEMGATE_ADMIN_TOKEN || 'dev-admin-token';
const VIEWER_TOKEN = process.env.MEMGATE_ADMIN_VIEWER_TOKEN || 'dev-viewer-token';
const DIST = process.env.MOCK_DIST ?? path.join(here, '..', 'dist');
const SCHEMAS_DIR = process.env.MOCK_SCHEMAS ?? path.join(here, '..', '..', 'schemas');
const TRAFFIC = process.env.MOCK_TRAFFIC !== '0';
const PERMISSIONS = ['pin_release', 'assert_subject', 'debug', 'batches', 'files', 'upstream_other'];
const SESSION_SECS = 12 * 3600;
const IDLE_SECS = 3600;
export const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

// ---------------------------------------------------------------- state

const started = Date.now();
const schemas = loadSchemas();
const { releases, history: releaseHistory, canaryShare } = seedReleases(started);
const releaseNames = releases.map((r) => r.name);
const metrics = new Map([['default', new MetricsStore(started, releaseNames, canaryShare)]]);
const tenants = new Map();
const sessions = new Map(); // sha256(cookie) -> {role, actor, expires, lastSeen}
const strikes = new Map(); // address -> [ms]
const shadow = new Map(releaseNames.map((n) => [n, { sampled: 0, ids_added: 0, ids_dropped: 0, tokens_delta: 0, recent: [] }]));
const rnd = random(99);
seedShadow();
tenant('default', seedRecords(started), seedKeys(started));
tenant('acme', seedAcmeRecords(started), []);
seedRecent();

function loadSchemas() {
  const out = {};
  for (const version of fs.readdirSync(SCHEMAS_DIR).sort()) {
    const dir = path.join(SCHEMAS_DIR, version);
    if (!fs.statSync(dir).isDirectory()) continue;
    out[version] = {};
    for (const file of fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort()) {
      out[version][file.slice(0, -5)] = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
    }
  }
  return out;
}

function tenant(name, records = [], keys = []) {
  if (!tenants.has(name)) {
    const t = { name, records: new Map(), changes: new Map(), keys, imports: new Map(), recent: [] };
    for (const r of records) {
      t.records.set(r.id, { ...r, tenant: name });
      t.changes.set(r.id, [{ revision: 1, action: 'create', actor: 'crm-sync', at: r.created_at, before: null, after: envelopeJson(r) }]);
      if (r.revision > 1) {
        const before = envelopeJson(r);
        t.changes.get(r.id).push({ revision: r.revision, action: 'update', actor: 'console:alice', at: r.updated_at, before: { ...before, priority: 3, aliases: ['next week delivery'] }, after: before });
      }
    }
    tenants.set(name, t);
  }
  return tenants.get(name);
}

function metricsOf(name) {
  if (!metrics.has(name)) metrics.set(name, new MetricsStore(Date.now(), releaseNames, () => 0, true));
  return metrics.get(name);
}

function seedShadow() {
  const s = shadow.get('v2');
  const ids = ['mem-fact-0042', 'mem-sop-delay-002', 'mem-prod-rtr-ax3000', 'mem-conv-88121', 'mem-sop-premium-003'];
  for (let i = 0; i < 240; i++) {
    const added = rnd() < 0.3 ? [ids[i % ids.length]] : [];
    const dropped = rnd() < 0.12 ? [ids[(i + 2) % ids.length]] : [];
    const delta = Math.round((rnd() - 0.3) * 180);
    s.sampled += 1;
    s.ids_added += added.length;
    s.ids_dropped += dropped.length;
    s.tokens_delta += delta;
    s.recent.push({ added, dropped, tokens_delta: delta });
    if (s.recent.length > 20) s.recent.shift();
  }
}

function seedRecent() {
  const t = tenant('default');
  for (let i = 0; i < 24; i++) addRecent(t, started - (24 - i) * 97_000, i);
}

// ---------------------------------------------------------------- helpers

class ApiError extends Error {
  constructor(status, type, message, extra = {}) {
    super(message);
    this.status = status;
    this.type = type;
    this.extra = extra;
  }
}
const invalid = (message, extra) => new ApiError(400, 'invalid_request_error', message, extra);
const notFound = (message, extra) => new ApiError(404, 'not_found_error', message, extra);

const toJson = (r) => ({ ...envelopeJson(r), ...(r.author ? { author: r.author } : {}), tenant: r.tenant, revision: r.revision, created_at: r.created_at, updated_at: r.updated_at, last_accessed_at: r.last_accessed_at, access_count: r.access_count, metadata: { ...r.metadata, last_updated: r.updated_at } });

function envelopeJson(r) {
  const out = { id: r.id, type: r.type, schema_version: r.schema_version, scope: r.scope, valid_from: r.valid_from, valid_until: r.valid_until, priority: r.priority, aliases: r.aliases, content: r.content, metadata: r.metadata, status: r.status };
  if (r.key) out.key = r.key;
  return out;
}

const keyJson = (k, tenantName) => ({ id: k.id, tenant: tenantName, name: k.name, prefix: `mgk_${k.id}_`, scopes: k.scopes, permissions: k.permissions, rate_limit_per_minute: k.rate_limit_per_minute, created_at: k.created_at, revoked_at: k.revoked_at });

const releaseJson = (r) => ({ name: r.name, active: r.state.stage === 'active', rollout: structuredClone(r.state), schema_versions: r.schema_versions, similarity_threshold: r.similarity_threshold, budget_tokens: r.budget_tokens, max_items: r.max_items, placement: r.placement });

const hex = (n) => crypto.randomBytes(n).toString('hex');
const nowIso = () => iso(Date.now());
function activeRelease() {
  return releases.find((r) => r.state.stage === 'active');
}

function refusal(problems) {
  const summary = problems.map((p) => `${p.path} (${p.kind})`).join(', ');
  return new ApiError(422, 'invalid_request_error', `the record was refused: ${summary}`, { problems });
}

function checkQuery(query, allowed) {
  for (const name of query.keys()) {
    if (!allowed.includes(name)) throw invalid(`bad query string: unknown field \`${name}\`, expected one of ${allowed.map((a) => `\`${a}\``).join(', ')}`);
  }
}

function readBody(req, limit = 5 * 1024 * 1024) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > limit) {
        reject(new ApiError(413, 'request_too_large', `the body is larger than ${limit} bytes`));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

async function jsonBody(req) {
  const text = await readBody(req, 1024 * 1024);
  try {
    return JSON.parse(text);
  } catch (err) {
    throw invalid(`the body is not valid JSON: ${err.message}`);
  }
}

function addChange(t, id, action, actor, before, after, revision) {
  if (!t.changes.has(id)) t.changes.set(id, []);
  t.changes.get(id).push({ revision, action, actor, at: nowIso(), before, after });
}

function storeNew(t, env, actor, action = 'create', author = `admin:${actor}`) {
  const id = env.id ?? `mem-${hex(6)}`;
  const at = nowIso();
  const r = { id, type: env.type, schema_version: env.schema_version, scope: env.scope, valid_from: env.valid_from, valid_until: env.valid_until, priority: env.priority, aliases: env.aliases, content: env.content, metadata: env.metadata, status: env.status ?? 'active', tenant: t.name, revision: 1, created_at: at, updated_at: at, last_accessed_at: null, access_count: 0 };
  if (env.key) r.key = env.key;
  if (author) r.author = author;
  t.records.set(id, r);
  addChange(t, id, action, actor, null, envelopeJson(r), 1);
  return r;
}

function storeUpdate(t, r, env, actor, action) {
  const before = envelopeJson(r);
  Object.assign(r, { type: env.type, schema_version: env.schema_version, scope: env.scope, valid_from: env.valid_from, valid_until: env.valid_until, priority: env.priority, aliases: env.aliases, content: env.content, metadata: env.metadata });
  if (env.key) r.key = env.key;
  else delete r.key;
  if (env.status) r.status = env.status;
  r.revision += 1;
  r.updated_at = nowIso();
  addChange(t, r.id, action, actor, before, envelopeJson(r), r.revision);
  return r;
}

function getRecord(t, id) {
  const r = t.records.get(id);
  if (!r) throw notFound(`no record \`${id}\` in this tenant`);
  return r;
}

function listFilter(query) {
  const status = query.get('status') || null;
  if (status && !['active', 'paused', 'archived', 'proposed', 'dormant'].includes(status)) throw invalid('status must be active, paused, archived, proposed or dormant');
  const valid = query.get('valid') || null;
  if (valid && !['now', 'expired', 'future'].includes(valid)) throw invalid('valid must be now, expired or future');
  const q = (query.get('q') || '').toLowerCase();
  if (q.length > 256) throw invalid('q is limited to 256 characters');
  const scope = query.get('scope') || null;
  const type = query.get('type') || null;
  const key = query.get('key') || null;
  const author = query.get('author') || null;
  const now = Date.now();
  return (r) => {
    if (author && r.author !== author) return false;
    if (status && r.status !== status) return false;
    if (type && r.type !== type) return false;
    if (scope && !r.scope.includes(scope)) return false;
    if (key && r.key !== key) return false;
    if (valid === 'now' && !(Date.parse(r.valid_from) <= now && now < Date.parse(r.valid_until))) return false;
    if (valid === 'expired' && !(Date.parse(r.valid_until) <= now)) return false;
    if (valid === 'future' && !(Date.parse(r.valid_from) > now)) return false;
    if (q && !JSON.stringify([r.id, r.key ?? '', r.aliases, r.content]).toLowerCase().includes(q)) return false;
    return true;
  };
}

function addRecent(t, at, i, releaseName) {
  const pool = queryPool();
  const [subject, query] = pool[i % pool.length];
  const key = t.keys.find((k) => k.name === 'support-bot');
  const scopes = new Set(['public', 'team:support', `user:${subject}`]);
  const release = releases.find((r) => r.name === releaseName) ?? activeRelease();
  const body = messagesBody(query, i);
  const result = explain([...t.records.values()], scopes, release, body, at);
  const id = `req_${crypto.createHash('sha256').update(`${at}:${i}`).digest('hex').slice(0, 20)}`;
  t.recent.unshift({
    request_id: id, at: iso(at), release: release.name,
    caller: { kind: 'key', key_id: key?.id ?? 'k7f3a9', name: key?.name ?? 'support-bot', subject, scopes: [...scopes].sort() },
    model: body.model, stream: body.stream, memory_status: 'ok', injected: result.injected.length + result.stubs.length,
    tokens: result.tokens, status: rnd() < 0.02 ? 529 : 200, query_preview: query.slice(0, 120), explainable: true, body,
  });
  if (t.recent.length > 200) t.recent.pop();
  for (const rid of result.injected) {
    const r = t.records.get(rid);
    if (r) {
      r.access_count += 1;
      r.last_accessed_at = iso(at);
    }
  }
}

// ---------------------------------------------------------------- auth, sessions, CSRF

function clientAddr(req) {
  return req.socket.remoteAddress ?? 'unknown';
}

function strike(req) {
  const addr = clientAddr(req);
  const now = Date.now();
  const list = (strikes.get(addr) ?? []).filter((t) => t > now - 60_000);
  list.push(now);
  strikes.set(addr, list);
  if (list.length > 30) throw new ApiError(429, 'rate_limit_error', 'too many failed admin authentications from this address; retry in 60 s', { retry_after: 60 });
}

function tokenRole(token) {
  const eq = (a, b) => a.length === b.length && crypto.timingSafeEqual(Buffer.from(a), Buffer.from(b));
  if (eq(token, ADMIN_TOKEN)) return 'admin';
  if (VIEWER_TOKEN && eq(token, VIEWER_TOKEN)) return 'viewer';
  return null;
}

function cookieValue(req) {
  const header = req.headers.cookie ?? '';
  for (const part of header.split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === 'memgate_console') return v.join('=');
  }
  return null;
}

const sessionKey = (value) => crypto.createHash('sha256').update(value).digest('hex');

function findSession(req) {
  const value = cookieValue(req);
  if (!value) return null;
  const s = sessions.get(sessionKey(value));
  const now = Date.now();
  if (!s || s.expires <= now || s.lastSeen + IDLE_SECS * 1000 <= now) {
    if (s) sessions.delete(sessionKey(value));
    return null;
  }
  s.lastSeen = now;
  return s;
}

/** The CSRF rule of API.md §2, exactly. */
function checkCsrf(req) {
  const refuse = () => new ApiError(403, 'permission_error', 'console requests must come from the console itself', { code: 'csrf_refused' });
  if (req.headers['x-memgate-console'] !== '1') throw refuse();
  const origin = req.headers.origin;
  if (origin !== undefined) {
    const norm = (o) => o.toLowerCase().replace(/^(http:\/\/[^/]+):80$/, '$1').replace(/^(https:\/\/[^/]+):443$/, '$1');
    const own = `http://${req.headers.host ?? ''}`;
    if (origin === 'null' || norm(origin) !== norm(own)) throw refuse();
  }
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin') throw refuse();
}

/** Who is calling /admin/v1: {role, actor}; throws the API's errors. */
function authenticate(req) {
  const auth = req.headers.authorization;
  if (auth?.startsWith('Bearer ')) {
    const role = tokenRole(auth.slice(7));
    if (!role) {
      strike(req);
      throw new ApiError(401, 'authentication_error', 'the admin API needs `Authorization: Bearer <MEMGATE_ADMIN_TOKEN>`');
    }
    const actor = req.headers['x-memory-actor'];
    if (actor !== undefined && !/^[A-Za-z0-9._:-]{1,64}$/.test(actor)) throw invalid("x-memory-actor must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'");
    return { role, actor: actor ?? 'admin' };
  }
  const session = findSession(req);
  if (!session) {
    if (cookieValue(req)) throw new ApiError(401, 'authentication_error', 'the console session has ended; log in again', { code: 'no_session' });
    throw new ApiError(401, 'authentication_error', 'the admin API needs `Authorization: Bearer <MEMGATE_ADMIN_TOKEN>`');
  }
  checkCsrf(req);
  return { role: session.role, actor: session.actor };
}

function viewerMay(method, pathname, query) {
  if (method === 'GET' || method === 'HEAD') return true;
  if (method === 'POST' && pathname === '/admin/v1/explain') return true;
  return method === 'POST' && pathname === '/admin/v1/import' && query.get('dry_run') === 'true';
}

function sessionAnswer(s) {
  return { authenticated: true, role: s.role, actor: s.actor, tenants: [...tenants.keys()].sort(), expires_at: iso(s.expires), idle_timeout_secs: IDLE_SECS };
}

async function consoleSession(req, res) {
  if (req.method === 'POST') {
    checkCsrf(req);
    const body = await jsonBody(req);
    if (typeof body?.token !== 'string') throw invalid('log in with {"token": "<admin token>", "actor": "your-name"}');
    if (body.actor !== undefined && body.actor !== '' && !/^[A-Za-z0-9._:-]{1,64}$/.test(body.actor)) {
      throw invalid("actor must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'");
    }
    const role = tokenRole(body.token);
    if (!role) {
      strike(req);
      throw new ApiError(401, 'authentication_error', "that token is not this memgate's admin or viewer token");
    }
    const value = crypto.randomBytes(32).toString('base64url');
    const now = Date.now();
    const s = { role, actor: body.actor ? `console:${body.actor}` : 'console', expires: now + SESSION_SECS * 1000, lastSeen: now };
    sessions.set(sessionKey(value), s);
    return send(res, 200, sessionAnswer(s), { 'Set-Cookie': `memgate_console=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${SESSION_SECS}` });
  }
  if (req.method === 'GET') {
    const s = findSession(req);
    if (!s) return send(res, 200, { authenticated: false });
    checkCsrf(req);
    return send(res, 200, sessionAnswer(s));
  }
  if (req.method === 'DELETE') {
    checkCsrf(req);
    const value = cookieValue(req);
    if (value) sessions.delete(sessionKey(value));
    return send(res, 204, null, { 'Set-Cookie': 'memgate_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0' });
  }
  throw new ApiError(405, 'invalid_request_error', `method ${req.method} is not allowed on /console/session`);
}

// ---------------------------------------------------------------- admin routes

const routes = [];
const route = (method, pattern, handler) => routes.push({ method, re: new RegExp(`^/admin/v1${pattern}$`), handler });

route('GET', '/memories', ({ t, query }) => {
  checkQuery(query, ['scope', 'type', 'status', 'q', 'limit', 'cursor', 'valid', 'key', 'author']);
  const limit = Math.min(500, Math.max(1, Number(query.get('limit') ?? 50) || 50));
  const cursor = query.get('cursor');
  const keep = listFilter(query);
  const all = [...t.records.values()].filter(keep).sort((a, b) => (a.id < b.id ? -1 : 1)).filter((r) => !cursor || r.id > cursor);
  const page = all.slice(0, limit);
  return { data: page.map(toJson), next_cursor: page.length === limit && all.length > limit ? page[page.length - 1].id : null };
});

route('POST', '/memories', async ({ t, req, who }) => {
  const input = await jsonBody(req);
  const { problems, envelope } = checkEnvelope(input, schemas);
  if (problems) throw refusal(problems);
  if (envelope.id && t.records.has(envelope.id)) throw new ApiError(409, 'invalid_request_error', `a record with id \`${envelope.id}\` already exists; PATCH it to change it`);
  if (envelope.key) {
    const twin = [...t.records.values()].find((r) => r.status === 'active' && r.key === envelope.key && JSON.stringify(r.scope) === JSON.stringify(envelope.scope));
    if (twin) {
      const r = storeUpdate(t, twin, { ...envelope, status: undefined }, who.actor, 'supersede');
      return { status: 200, body: { id: r.id, revision: r.revision, record: toJson(r), superseded: true } };
    }
  }
  const r = storeNew(t, envelope, who.actor);
  return { status: 201, body: { id: r.id, revision: r.revision, record: toJson(r) } };
});

route('POST', '/memories/forget', async ({ t, req }) => {
  const input = await jsonBody(req);
  if (typeof input?.scope !== 'string') throw invalid('forget takes {"scope": "user:u-789"}');
  if (!isValidScope(input.scope)) throw invalid(`\`${input.scope}\` is not \`public\` or \`kind:value\``);
  let records = 0;
  let changes = 0;
  for (const [id, r] of t.records) {
    if (r.scope.includes(input.scope)) {
      t.records.delete(id);
      changes += (t.changes.get(id) ?? []).length;
      t.changes.delete(id);
      records += 1;
    }
  }
  return { scope: input.scope, records_erased: records, changes_erased: changes };
});

route('GET', '/memories/([^/]+)', ({ t, m }) => toJson(getRecord(t, m[1])));

route('PATCH', '/memories/([^/]+)', async ({ t, m, req, who }) => {
  const r = getRecord(t, m[1]);
  const ifMatch = req.headers['if-match'];
  if (ifMatch !== undefined) {
    const expected = Number(String(ifMatch).trim().replace(/^W\//, '').replace(/"/g, ''));
    if (!Number.isInteger(expected)) throw invalid('If-Match must be a record revision, e.g. `If-Match: 3`');
    if (expected !== r.revision) throw new ApiError(409, 'invalid_request_error', `revision conflict: If-Match said ${expected}, the record is at revision ${r.revision}; read it again and retry`);
  }
  const patch = await jsonBody(req);
  const merged = mergePatch(envelopeJson(r), patch);
  const { problems, envelope } = checkEnvelope(merged, schemas);
  if (problems) throw refusal(problems);
  return toJson(storeUpdate(t, r, envelope, who.actor, 'update'));
});

route('DELETE', '/memories/([^/]+)', ({ t, m, who }) => {
  const r = getRecord(t, m[1]);
  addChange(t, r.id, 'delete', who.actor, envelopeJson(r), null, r.revision + 1);
  t.records.delete(r.id);
  return { id: r.id, deleted: true };
});

route('GET', '/memories/([^/]+)/history', ({ t, m }) => {
  if (!t.records.has(m[1]) && !t.changes.has(m[1])) throw notFound(`no record \`${m[1]}\` in this tenant`);
  return { id: m[1], data: t.changes.get(m[1]) ?? [] };
});

// Review: approve or reject several proposed records, each id answered on its own.
for (const decision of ['activate', 'reject']) {
  route('POST', `/memories/${decision}`, async ({ t, req, who }) => {
    const input = await jsonBody(req);
    const ids = input?.ids;
    if (!Array.isArray(ids) || !ids.length || ids.length > 100) throw invalid('the body is {"ids": ["mem-…", …]} with 1 to 100 record ids');
    const data = [...new Set(ids.map(String))].map((id) => {
      const r = t.records.get(id);
      if (!r) return { id, ok: false, error: { type: 'not_found_error', code: 'not_found', message: `no record \`${id}\` in this tenant` } };
      if (decision === 'reject') {
        if (r.status !== 'proposed') return { id, ok: false, error: { type: 'invalid_request_error', code: 'not_proposed', message: `record \`${id}\` is ${r.status}, not proposed` } };
        addChange(t, r.id, 'delete', who.actor, envelopeJson(r), null, r.revision + 1);
        t.records.delete(id);
        return { id, ok: true, deleted: true };
      }
      if (r.status !== 'active') {
        const before = envelopeJson(r);
        r.status = 'active';
        r.revision += 1;
        r.updated_at = nowIso();
        addChange(t, r.id, 'activate', who.actor, before, envelopeJson(r), r.revision);
      }
      return { id, ok: true, status: r.status, revision: r.revision };
    });
    const done = data.filter((x) => x.ok).length;
    return { data, done, failed: data.length - done };
  });
}

// Approve with edits: a body on activate is a partial envelope applied in the same write.
route('POST', '/memories/([^/]+)/activate', async ({ t, m, req, who }) => {
  const r = getRecord(t, m[1]);
  const text = await readBody(req, 1024 * 1024);
  if (text.trim()) {
    let patch;
    try {
      patch = JSON.parse(text);
    } catch (err) {
      throw invalid(`the body is not valid JSON: ${err.message}`);
    }
    const merged = mergePatch(envelopeJson(r), { ...patch, status: 'active' });
    const { problems, envelope } = checkEnvelope(merged, schemas);
    if (problems) throw refusal(problems);
    return toJson(storeUpdate(t, r, envelope, who.actor, 'update'));
  }
  if (r.status === 'active') return toJson(r);
  const before = envelopeJson(r);
  r.status = 'active';
  r.revision += 1;
  r.updated_at = nowIso();
  addChange(t, r.id, 'activate', who.actor, before, envelopeJson(r), r.revision);
  return toJson(r);
});

for (const [action, status] of [['pause', 'paused'], ['archive', 'archived']]) {
  route('POST', `/memories/([^/]+)/${action}`, ({ t, m, who }) => {
    const r = getRecord(t, m[1]);
    if (r.status === status) return toJson(r);
    const before = envelopeJson(r);
    r.status = status;
    r.revision += 1;
    r.updated_at = nowIso();
    addChange(t, r.id, action, who.actor, before, envelopeJson(r), r.revision);
    return toJson(r);
  });
}

route('GET', '/export', ({ t, query }) => {
  checkQuery(query, ['scope', 'type', 'status', 'q', 'limit', 'cursor', 'valid', 'key']);
  const keep = listFilter(query);
  const lines = [...t.records.values()].filter(keep).sort((a, b) => (a.id < b.id ? -1 : 1)).map((r) => JSON.stringify(envelopeJson(r)));
  return { raw: lines.map((l) => `${l}\n`).join(''), type: 'application/x-ndjson' };
});

route('POST', '/import', async ({ t, req, query, who }) => {
  checkQuery(query, ['dry_run']);
  const dryRunText = query.get('dry_run');
  if (dryRunText !== null && !['true', 'false'].includes(dryRunText)) throw invalid('bad query string: dry_run must be true or false');
  const dryRun = dryRunText === 'true';
  const text = await readBody(req);
  const lines = [];
  const counts = { new: 0, existing: 0, invalid: 0 };
  const toAdd = [];
  const seen = new Map();
  text.split('\n').forEach((raw, index) => {
    const line = index + 1;
    if (!raw.trim()) return;
    let value;
    try {
      value = JSON.parse(raw);
    } catch (err) {
      counts.invalid += 1;
      lines.push({ line, status: 'invalid', problems: [{ path: '$', kind: 'invalid_json', message: `not a JSON object: ${err.message}` }] });
      return;
    }
    const { problems, envelope } = checkEnvelope(value, schemas);
    if (problems) {
      counts.invalid += 1;
      lines.push({ line, status: 'invalid', problems });
      return;
    }
    const id = envelope.id ?? `mem-${hex(6)}`;
    if (seen.has(id)) {
      counts.invalid += 1;
      lines.push({ line, status: 'invalid', problems: [{ path: '$.id', kind: 'duplicate_in_file', message: `id \`${id}\` repeats line ${seen.get(id)}` }] });
      return;
    }
    seen.set(id, line);
    if (t.records.has(id)) {
      counts.existing += 1;
      lines.push({ line, status: 'existing', id });
    } else {
      counts.new += 1;
      lines.push({ line, status: 'new', id });
      toAdd.push({ ...envelope, id });
    }
  });
  const report = { dry_run: dryRun, import_id: null, applied: false, counts, lines };
  if (dryRun) return report;
  if (counts.invalid) throw new ApiError(422, 'invalid_request_error', `${counts.invalid} line(s) are invalid; nothing was imported. Fix them (see \`report\`) and import again`, { report });
  const importId = `imp-${hex(8)}`;
  const added = toAdd.map((env) => storeNew(t, env, who.actor, 'import'));
  t.imports.set(importId, { ids: added.map((r) => r.id), undone: false });
  return { status: 201, body: { ...report, import_id: importId, applied: true } };
});

route('POST', '/imports/([^/]+)/undo', ({ t, m, who }) => {
  const imp = t.imports.get(m[1]);
  if (!imp || imp.undone) throw notFound(`no import \`${m[1]}\` to undo in this tenant (it may have been undone already)`);
  imp.undone = true;
  const removed = [];
  for (const id of imp.ids) {
    const r = t.records.get(id);
    if (r) {
      addChange(t, id, 'undo_import', who.actor, envelopeJson(r), null, r.revision + 1);
      t.records.delete(id);
      removed.push(id);
    }
  }
  return { import_id: m[1], removed: removed.length, ids: removed };
});

route('GET', '/keys', ({ t }) => ({ data: t.keys.map((k) => keyJson(k, t.name)) }));

route('POST', '/keys', async ({ t, req }) => {
  const input = await jsonBody(req);
  const shape = 'a key is {"name", "scopes": [], "permissions": [], "rate_limit_per_minute"}';
  const unknown = Object.keys(input ?? {}).find((k) => !['name', 'scopes', 'permissions', 'rate_limit_per_minute'].includes(k));
  if (unknown) throw invalid(`${shape}: unknown field \`${unknown}\``);
  if (typeof input.name !== 'string' || !input.name.trim() || input.name.length > 64) throw invalid('name must be 1 to 64 characters');
  const scopes = input.scopes ?? [];
  const bad = scopes.find((s) => !isValidScope(s));
  if (bad !== undefined) throw invalid(`scopes: \`${bad}\` is not \`public\` or \`kind:value\``);
  const permissions = input.permissions ?? [];
  const badP = permissions.find((p) => !PERMISSIONS.includes(p));
  if (badP !== undefined) throw invalid(`permissions: unknown permission \`${badP}\`; known: ${PERMISSIONS.join(', ')}`);
  const rate = input.rate_limit_per_minute ?? null;
  if (rate !== null && (!Number.isInteger(rate) || rate < 1 || rate > 1_000_000)) throw invalid('rate_limit_per_minute must be an integer from 1 to 1000000');
  const k = { id: hex(3), name: input.name, scopes, permissions, rate_limit_per_minute: rate, created_at: nowIso(), revoked_at: null };
  t.keys.push(k);
  return { status: 201, body: { ...keyJson(k, t.name), key: `mgk_${k.id}_${crypto.randomBytes(24).toString('base64url')}` } };
});

route('DELETE', '/keys/([^/]+)', ({ t, m }) => {
  const k = t.keys.find((x) => x.id === m[1] && !x.revoked_at);
  if (!k) throw notFound(`no key \`${m[1]}\` in this tenant`);
  k.revoked_at = nowIso();
  return { id: k.id, revoked: true };
});

const releaseByName = (name) => {
  const r = releases.find((x) => x.name === name);
  if (!r) throw notFound(`no release \`${name}\``);
  return r;
};

route('GET', '/releases', () => ({ data: releases.map(releaseJson) }));
route('GET', '/releases/([^/]+)', ({ m }) => releaseJson(releaseByName(m[1])));

const STATE_FIELDS = ['stage', 'canary_percent', 'allow', 'guard', 'shadow_sample_percent', 'note', 'stage_since_ms'];
const GUARD_FIELDS = ['enabled', 'window_secs', 'min_calls', 'max_error_rate', 'promote_after_secs'];

route('PATCH', '/releases/([^/]+)', async ({ m, req, who }) => {
  const r = releaseByName(m[1]);
  const patch = await jsonBody(req);
  if (!patch || typeof patch !== 'object' || Array.isArray(patch)) throw invalid('the body must be a JSON object of rollout fields');
  if (patch.stage === 'active') throw invalid('make a release active with POST …/promote');
  if ('stage_since_ms' in patch) throw invalid('`stage_since_ms` is kept by memgate; leave it out');
  const before = structuredClone(r.state);
  const defaults = { stage: 'available', canary_percent: 0, allow: { subjects: [], teams: [], cidrs: [] }, guard: { enabled: true, window_secs: 60, min_calls: 20, max_error_rate: 0.2, promote_after_secs: 0 }, shadow_sample_percent: 0, note: null };
  const after = mergePatch(before, patch);
  for (const k of Object.keys(after)) if (!STATE_FIELDS.includes(k)) throw invalid(`rollout fields: unknown field \`${k}\`, expected one of ${STATE_FIELDS.map((f) => `\`${f}\``).join(', ')}`);
  for (const k of Object.keys(after.guard ?? {})) if (!GUARD_FIELDS.includes(k)) throw invalid(`rollout fields: unknown field \`${k}\` in guard`);
  for (const [k, v] of Object.entries(defaults)) if (after[k] === undefined) after[k] = structuredClone(v);
  after.guard = { ...defaults.guard, ...after.guard };
  after.allow = { ...defaults.allow, ...after.allow };
  if (!['available', 'canary', 'shadow', 'retired', 'active'].includes(after.stage)) throw invalid(`rollout fields: unknown variant \`${after.stage}\`, expected one of \`available\`, \`canary\`, \`shadow\`, \`active\`, \`retired\``);
  if (typeof after.canary_percent !== 'number' || after.canary_percent < 0 || after.canary_percent > 100) throw invalid('canary_percent must be between 0 and 100');
  if (typeof after.shadow_sample_percent !== 'number' || after.shadow_sample_percent < 0 || after.shadow_sample_percent > 100) throw invalid('shadow_sample_percent must be between 0 and 100');
  if (typeof after.guard.max_error_rate !== 'number' || after.guard.max_error_rate < 0 || after.guard.max_error_rate > 1) throw invalid('guard.max_error_rate must be between 0 and 1');
  if (!(after.guard.window_secs >= 1 && after.guard.window_secs <= 3600)) throw invalid('guard.window_secs must be between 1 and 3600');
  const badCidr = after.allow.cidrs.find((c) => !/^[0-9a-fA-F:.]+(\/\d{1,3})?$/.test(c));
  if (badCidr) throw invalid(`allow.cidrs: \`${badCidr}\` is not a CIDR block like 10.0.0.0/8`);
  if (before.stage === 'active' && after.stage !== 'active') throw invalid('the active release cannot change stage; promote another release');
  if (after.stage !== before.stage) {
    after.stage_since_ms = Date.now();
    metricsOf('default').resetWindow(r.name);
  }
  r.state = after;
  releaseHistory[r.name].push({ action: 'patch', actor: who.actor, reason: '', at: nowIso(), before, after: structuredClone(after) });
  return { name: r.name, rollout: structuredClone(after) };
});

async function reasonOf(req) {
  const text = await readBody(req, 1024 * 1024);
  if (!text.trim()) return '';
  try {
    return String(JSON.parse(text).reason ?? '').slice(0, 500);
  } catch (err) {
    throw invalid(`the body is not valid JSON: ${err.message}`);
  }
}

function promote(r, actor, reason) {
  const previous = activeRelease();
  if (previous === r) return;
  const now = Date.now();
  const beforeNew = structuredClone(r.state);
  r.state = { ...r.state, stage: 'active', canary_percent: 0, note: null, stage_since_ms: now };
  const beforeOld = structuredClone(previous.state);
  previous.state = { ...previous.state, stage: 'available', stage_since_ms: now };
  releaseHistory[r.name].push({ action: 'promote', actor, reason, at: iso(now), before: beforeNew, after: structuredClone(r.state) });
  releaseHistory[previous.name].push({ action: 'promote', actor, reason, at: iso(now), before: beforeOld, after: structuredClone(previous.state) });
  metricsOf('default').resetWindow(r.name);
}

function rollback(r, actor, reason) {
  if (r.state.stage === 'active') throw invalid('the active release cannot be rolled back; promote another release');
  if (r.state.stage === 'retired') throw invalid(`release \`${r.name}\` is retired and serves nobody already; PATCH its stage to bring it back`);
  const before = structuredClone(r.state);
  r.state = { ...r.state, stage: 'available', canary_percent: 0, note: reason || null, stage_since_ms: Date.now() };
  releaseHistory[r.name].push({ action: 'rollback', actor, reason, at: nowIso(), before, after: structuredClone(r.state) });
  metricsOf('default').resetWindow(r.name);
}

route('POST', '/releases/([^/]+)/promote', async ({ m, req, who }) => {
  const r = releaseByName(m[1]);
  promote(r, who.actor, await reasonOf(req));
  return { name: r.name, active: true };
});

route('POST', '/releases/([^/]+)/rollback', async ({ m, req, who }) => {
  const r = releaseByName(m[1]);
  rollback(r, who.actor, await reasonOf(req));
  return { name: r.name, rolled_back: true };
});

route('GET', '/releases/([^/]+)/stats', ({ m }) => {
  const r = releaseByName(m[1]);
  const store = metricsOf('default');
  const hour = store.history(Date.now(), '1h', r.name).totals;
  const all = store.history(Date.now(), '1h').totals;
  const win = store.window(r.name, Date.now(), r.state.guard.window_secs);
  const errors = hour.errors.upstream + hour.errors.memory;
  const ratio = (a, b) => (b ? a / b : 0);
  return {
    name: r.name,
    stats: {
      calls: hour.calls, share: ratio(hour.calls, all.calls), upstream_errors: hour.errors.upstream, memory_errors: hour.errors.memory,
      error_rate: ratio(errors, hour.calls), injected_records: hour.injected_records, injected_tokens: hour.injected_tokens,
      added_latency_ms: { mean: hour.added_latency_ms.p50 * 1.1, ...hour.added_latency_ms },
      window: { secs: r.state.guard.window_secs, calls: win.calls, errors: win.errors, error_rate: ratio(win.errors, win.calls) },
      shadow: shadow.get(r.name),
    },
    scope: 'this replica, since it started',
  };
});

route('GET', '/releases/([^/]+)/history', ({ m }) => {
  releaseByName(m[1]);
  return { name: m[1], data: releaseHistory[m[1]] };
});

route('POST', '/explain', async ({ t, req }) => {
  const input = await jsonBody(req);
  const allowed = ['request', 'caller', 'release', 'request_id'];
  const unknown = Object.keys(input ?? {}).find((k) => !allowed.includes(k));
  const shape = 'explain takes {"request": <a Messages body>, "caller": {"scopes": [...], "subject": ..., "key_id": ...}, "release": ...} or {"request_id": ..., "release": ...}';
  if (unknown) throw invalid(`${shape}: unknown field \`${unknown}\``);
  let body;
  let scopes = new Set(['public']);
  let caller;
  if (input.request_id !== undefined) {
    if (input.request !== undefined || input.caller !== undefined) throw invalid('give either `request_id` or `request` and `caller`, not both');
    const kept = t.recent.find((x) => x.request_id === input.request_id);
    if (!kept || !kept.explainable) throw notFound(`request \`${input.request_id}\` is not kept on this replica any more; paste its body instead`, { code: 'request_not_kept' });
    body = kept.body;
    scopes = new Set(kept.caller.scopes);
    caller = { subject: kept.caller.subject, scopes: [...scopes].sort() };
  } else {
    if (!input.request || typeof input.request !== 'object') throw invalid(`${shape}: missing field \`request\``);
    body = input.request;
    const c = input.caller ?? {};
    for (const s of c.scopes ?? []) {
      if (!isValidScope(s)) throw invalid(`caller.scopes: \`${s}\` is not \`public\` or \`kind:value\``);
      scopes.add(s);
    }
    if (c.subject !== undefined && c.subject !== null) {
      if (typeof c.subject !== 'string' || !/^[\x21-\x7e]{1,128}$/.test(c.subject)) throw invalid('caller.subject must be 1 to 128 printable characters without spaces');
      scopes.add(`user:${c.subject}`);
    }
    if (c.key_id !== undefined && c.key_id !== null && c.key_id !== '') {
      const k = t.keys.find((x) => x.id === c.key_id && !x.revoked_at);
      if (!k) throw invalid(`no live key \`${c.key_id}\` in this tenant`);
      k.scopes.forEach((s) => scopes.add(s));
    }
    caller = { subject: c.subject ?? null, scopes: [...scopes].sort() };
  }
  if (!Array.isArray(body.messages)) throw invalid('messages: field required (a Messages body has "model", "max_tokens" and "messages")');
  const release = input.release ? releases.find((r) => r.name === input.release) : activeRelease();
  if (!release) throw invalid(`unknown release \`${input.release}\``);
  const result = explain([...t.records.values()], scopes, release, body);
  return { release: release.name, request_id: input.request_id ?? null, caller, ...result };
});

route('GET', '/requests/recent', ({ t, query }) => {
  checkQuery(query, ['limit']);
  const limit = Number(query.get('limit') ?? 50);
  if (!Number.isInteger(limit) || limit < 1 || limit > 200) throw invalid('limit must be an integer from 1 to 200');
  return { replica: 'mock-1', data: t.recent.slice(0, limit).map(({ body, ...rest }) => rest) };
});

route('GET', '/schemas', () => ({ data: Object.keys(schemas).sort().map((v) => ({ schema_version: v, types: Object.keys(schemas[v]).sort() })) }));

route('GET', '/schemas/([^/]+)/([^/]+)', ({ m }) => {
  const versions = Object.keys(schemas).sort();
  if (!schemas[m[1]]) throw notFound(`no schema version \`${m[1]}\`; known: ${versions.join(', ')}`);
  const s = schemas[m[1]][m[2]];
  if (!s) throw notFound(`schema version ${m[1]} has no type \`${m[2]}\`; known: ${Object.keys(schemas[m[1]]).sort().join(', ')}`);
  return s;
});

function windowParam(query, fallback) {
  const window = query.get('window') ?? fallback;
  if (!['1h', '24h'].includes(window)) throw invalid('window must be 1h or 24h');
  return window;
}

route('GET', '/metrics/history', ({ t, query }) => {
  checkQuery(query, ['window', 'release']);
  const window = windowParam(query, '1h');
  const release = query.get('release');
  if (release !== null) releaseByName(release);
  return metricsOf(t.name).history(Date.now(), window, release ?? undefined);
});

route('GET', '/metrics/releases', ({ t, query }) => {
  checkQuery(query, ['window']);
  return metricsOf(t.name).releases(Date.now(), windowParam(query, '24h'));
});

route('GET', '/health/data', ({ t }) => {
  const now = Date.now();
  const all = [...t.records.values()];
  const live = all.filter((r) => r.status === 'active');
  const share = (n) => (live.length ? Math.round((n / live.length) * 10000) / 10000 : 0);
  const nonEmpty = (v) => (typeof v === 'string' ? v.trim() !== '' : Array.isArray(v) ? v.some(nonEmpty) : v && typeof v === 'object' ? Object.values(v).some(nonEmpty) : v !== null && v !== undefined);
  const failures = [];
  for (const r of live) {
    const schema = schemas[r.schema_version]?.[r.type];
    if (!schema) continue;
    const problems = [];
    validateSchema(r.content, schema, '$.content', schema.title, problems);
    if (problems.length) failures.push({ id: r.id, type: r.type, schema_version: r.schema_version, problems });
  }
  const never = live.filter((r) => r.access_count === 0);
  const types = [...new Set(live.map((r) => r.type))].sort();
  return {
    computed_at: iso(now),
    records: { total: all.length, active: live.length, paused: all.filter((r) => r.status === 'paused').length, archived: all.filter((r) => r.status === 'archived').length },
    live: live.length,
    non_empty_content: { count: live.filter((r) => nonEmpty(r.content)).length, share: share(live.filter((r) => nonEmpty(r.content)).length) },
    future_valid_until: { count: live.filter((r) => Date.parse(r.valid_until) > now).length, share: share(live.filter((r) => Date.parse(r.valid_until) > now).length) },
    not_yet_valid: { count: live.filter((r) => Date.parse(r.valid_from) > now).length },
    schema_failures: { count: failures.length, items: failures.slice(0, 50) },
    never_injected: { count: never.length, share: share(never.length), sample: never.slice(0, 20).map((r) => r.id) },
    by_type: types.map((type) => ({ type, live: live.filter((r) => r.type === type).length, never_injected: never.filter((r) => r.type === type).length, schema_failures: failures.filter((f) => f.type === type).length })),
  };
});

// ---------------------------------------------------------------- HTTP

function send(res, status, body, headers = {}) {
  const text = body === null ? '' : JSON.stringify(body);
  res.writeHead(status, { ...(body === null ? {} : { 'Content-Type': 'application/json' }), 'Cache-Control': 'no-store', ...headers });
  res.end(text);
}

function sendError(res, err) {
  if (!(err instanceof ApiError)) {
    console.error(err);
    err = new ApiError(500, 'api_error', 'memgate hit an internal error; see its log for details');
  }
  const { retry_after: retryAfter, ...extra } = err.extra;
  send(res, err.status, { type: 'error', error: { type: err.type, message: err.message, ...extra } }, retryAfter ? { 'Retry-After': String(retryAfter) } : {});
}

const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8', '.svg': 'image/svg+xml', '.json': 'application/json', '.map': 'application/json', '.png': 'image/png', '.ico': 'image/x-icon', '.woff2': 'font/woff2' };
const SECURITY_HEADERS = { 'Content-Security-Policy': CSP, 'X-Content-Type-Options': 'nosniff', 'Referrer-Policy': 'no-referrer', 'X-Frame-Options': 'DENY', 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Resource-Policy': 'same-origin' };

/** `/console/…` as API.md §1 says the Rust side serves it. */
function serveConsole(req, res, pathname, search) {
  if (pathname === '/console') {
    res.writeHead(308, { Location: `/console/${search}`, ...SECURITY_HEADERS });
    return res.end();
  }
  let rel = pathname.slice('/console/'.length);
  if (rel === '' || rel === 'index.html') rel = 'index.html';
  else if (!/^assets\/[A-Za-z0-9._-]+$/.test(rel)) throw notFound(`no console file \`${rel}\``);
  const file = path.join(DIST, rel);
  if (!fs.existsSync(file)) throw notFound(rel === 'index.html' ? 'the console is not built: run `npm run build` in console/' : `no console file \`${rel}\``);
  const bytes = fs.readFileSync(file);
  const etag = `"${crypto.createHash('sha256').update(bytes).digest('hex').slice(0, 32)}"`;
  const headers = { 'Content-Type': TYPES[path.extname(file)] ?? 'application/octet-stream', ...SECURITY_HEADERS };
  if (rel === 'index.html') {
    Object.assign(headers, { 'Cache-Control': 'no-cache', ETag: etag });
    if (req.headers['if-none-match'] === etag) {
      res.writeHead(304, headers);
      return res.end();
    }
  } else headers['Cache-Control'] = 'public, max-age=31536000, immutable';
  res.writeHead(200, { ...headers, 'Content-Length': bytes.length });
  res.end(req.method === 'HEAD' ? undefined : bytes);
}

async function handle(req, res) {
  const url = new URL(req.url, 'http://mock');
  const { pathname } = url;
  try {
    if (pathname === '/healthz') return send(res, 200, { status: 'ok' });
    if (pathname === '/console/session') {
      for (const [k, v] of Object.entries(SECURITY_HEADERS)) res.setHeader(k, v);
      return await consoleSession(req, res);
    }
    if (pathname === '/console' || pathname.startsWith('/console/')) {
      if (req.method !== 'GET' && req.method !== 'HEAD') throw new ApiError(405, 'invalid_request_error', `method ${req.method} is not allowed here`);
      return serveConsole(req, res, pathname, url.search);
    }
    if (!pathname.startsWith('/admin/v1/')) throw notFound(`no route for ${req.method} ${pathname}`);
    const who = authenticate(req);
    const tenantName = req.headers['x-memory-tenant'] ?? 'default';
    if (!/^[A-Za-z0-9._:-]{1,64}$/.test(tenantName)) throw invalid("x-memory-tenant must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'");
    const method = req.method === 'HEAD' ? 'GET' : req.method;
    let matchedPath = false;
    for (const r of routes) {
      const m = pathname.match(r.re);
      if (!m) continue;
      matchedPath = true;
      if (r.method !== method) continue;
      if (who.role === 'viewer' && !viewerMay(req.method, pathname, url.searchParams)) {
        throw new ApiError(403, 'permission_error', 'this session is read-only (viewer); log in with the admin token to change anything', { code: 'read_only_role' });
      }
      const out = await r.handler({ t: tenant(tenantName), m: m.map((x, i) => (i ? decodeURIComponent(x) : x)), req, query: url.searchParams, who });
      if (out && out.raw !== undefined) {
        res.writeHead(200, { 'Content-Type': out.type, 'Cache-Control': 'no-store' });
        return res.end(out.raw);
      }
      if (out && out.status && out.body) return send(res, out.status, out.body);
      return send(res, 200, out);
    }
    if (matchedPath) throw new ApiError(405, 'invalid_request_error', `method ${req.method} is not allowed on ${pathname}`);
    throw notFound(`no route for ${req.method} ${pathname}`);
  } catch (err) {
    sendError(res, err);
  }
}

// ---------------------------------------------------------------- simulated traffic and the guard

function trafficTick() {
  const now = Date.now();
  const active = activeRelease();
  const share = (name) => {
    const s = releases.find((r) => r.name === name).state;
    return s.stage === 'canary' ? s.canary_percent / 100 : 0;
  };
  metricsOf('default').tick(now, 2, share, active.name);
  const sh = releases.find((r) => r.state.stage === 'shadow' && r.state.shadow_sample_percent > 0);
  if (sh) {
    const s = shadow.get(sh.name);
    const added = rnd() < 0.3 ? ['mem-fact-0042'] : [];
    const dropped = rnd() < 0.1 ? ['mem-sop-premium-003'] : [];
    const delta = Math.round((rnd() - 0.3) * 180);
    Object.assign(s, { sampled: s.sampled + 1, ids_added: s.ids_added + added.length, ids_dropped: s.ids_dropped + dropped.length, tokens_delta: s.tokens_delta + delta });
    s.recent.push({ added, dropped, tokens_delta: delta });
    if (s.recent.length > 20) s.recent.shift();
  }
  if (rnd() < 0.35) {
    const t = tenant('default');
    const i = Math.floor(rnd() * 1000);
    const subject = queryPool()[i % queryPool().length][0];
    const canary = releases.find((r) => r.state.stage === 'canary' && hash01(subject) * 100 < r.state.canary_percent);
    addRecent(t, now, i, canary?.name);
  }
}

function guardTick() {
  const now = Date.now();
  for (const r of releases.filter((x) => x.state.stage === 'canary' && x.state.guard.enabled)) {
    const g = r.state.guard;
    const { calls, errors } = metricsOf('default').window(r.name, now, g.window_secs);
    if (calls < Math.max(1, g.min_calls)) continue;
    const rate = errors / calls;
    if (rate > g.max_error_rate) {
      rollback(r, 'guard', `guard: error rate ${(rate * 100).toFixed(1)}% over ${calls} calls in the last ${g.window_secs} s is above ${(g.max_error_rate * 100).toFixed(1)}%`);
    } else if (g.promote_after_secs > 0 && now - r.state.stage_since_ms >= g.promote_after_secs * 1000) {
      promote(r, 'guard', `guard: healthy for ${g.promote_after_secs} s (${(rate * 100).toFixed(1)}% errors over ${calls} calls)`);
    }
  }
}

const server = http.createServer((req, res) => {
  handle(req, res);
});
server.listen(PORT, HOST, () => {
  const { port } = server.address();
  console.log(`mock memgate admin API on http://${HOST}:${port}  (console: http://${HOST}:${port}/console/, admin token: ${ADMIN_TOKEN}, viewer token: ${VIEWER_TOKEN})`);
});
if (TRAFFIC) {
  setInterval(trafficTick, 2000).unref();
  setInterval(guardTick, 1000).unref();
}
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => server.close(() => process.exit(0)));
