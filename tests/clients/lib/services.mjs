// Services for the real-client suite: `memgate mock-upstream` and `memgate serve` as
// subprocesses on loopback ports chosen by the OS (the same way tests/sdk/conftest.py starts
// them), the admin API, the mock's request log, a recording tee between a client and memgate, and
// Claude Code run headless in a throw-away HOME and project folder.
//
// The binary is $MEMGATE_BIN, or <repo>/target/debug/memgate. The embedding model and ONNX
// Runtime come from MEMGATE_MODEL_DIR / ORT_DYLIB_PATH (tests/clients/run.sh sources
// .assets/env.sh), else from <repo>/.assets.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

export const CLIENTS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REPO = path.resolve(CLIENTS_DIR, '..', '..');
export const MEMGATE_BIN = process.env.MEMGATE_BIN || path.join(REPO, 'target', 'debug', 'memgate');
const STARTUP_DEADLINE_MS = Number(process.env.MEMGATE_CLIENTS_STARTUP_TIMEOUT_S || 30) * 1000;
const LISTENING = /listening on (http:\/\/127\.0\.0\.1:\d+)/;
// Settings the services keep from the caller's environment; every other MEMGATE_* and any
// Anthropic credential is dropped, so a developer's real settings never leak into a test.
const KEPT_SETTINGS = new Set(['MEMGATE_MODEL_DIR', 'MEMGATE_LOG_LEVEL', 'MEMGATE_LOG_FORMAT']);

/** A fresh folder under the OS temp dir, removed by `cleanup()`. */
export function tempDir(prefix) {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

function childEnv(extra = {}) {
  const env = { ...process.env };
  for (const name of Object.keys(env)) {
    if ((name.startsWith('MEMGATE_') && !KEPT_SETTINGS.has(name))
      || name === 'ANTHROPIC_API_KEY' || name === 'ANTHROPIC_AUTH_TOKEN') {
      delete env[name];
    }
  }
  const assets = path.join(REPO, '.assets');
  env.MEMGATE_MODEL_DIR ??= path.join(assets, 'models', 'multilingual-e5-small');
  if (!env.ORT_DYLIB_PATH) {
    const ortDir = path.join(assets, 'onnxruntime');
    const libs = fs.existsSync(ortDir) ? fs.readdirSync(ortDir).filter((f) => f.startsWith('libonnxruntime.so')).sort() : [];
    if (libs.length) env.ORT_DYLIB_PATH = path.join(ortDir, libs[libs.length - 1]);
  }
  return { ...env, ...extra };
}

/** A memgate subprocess that announced its URL. */
export class Service {
  constructor(name, proc, stderrPath) {
    this.name = name;
    this.proc = proc;
    this.stderrPath = stderrPath;
    this.url = '';
    this.exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
  }

  stderr() {
    try {
      return fs.readFileSync(this.stderrPath, 'utf8');
    } catch {
      return '';
    }
  }

  async stop() {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), 10_000);
    await this.exited;
    clearTimeout(timer);
  }
}

/**
 * Starts `memgate <args>` from the repository root (where templates/ and .assets/ are), waits for
 * its "listening on" line and returns the Service; its stderr goes to `<workdir>/<name>.stderr.log`.
 * Throws with the process's stderr when it exits or stays silent past the deadline.
 */
export async function startService(name, args, workdir, envExtra = {}) {
  try {
    fs.accessSync(MEMGATE_BIN, fs.constants.X_OK);
  } catch {
    throw new Error(`memgate binary not found at ${MEMGATE_BIN}: build it (cargo build) or set MEMGATE_BIN`);
  }
  const stderrPath = path.join(workdir, `${name}.stderr.log`);
  const stderrFd = fs.openSync(stderrPath, 'w');
  const proc = spawn(MEMGATE_BIN, args, {
    cwd: REPO,
    env: childEnv(envExtra),
    stdio: ['ignore', 'pipe', stderrFd],
  });
  fs.closeSync(stderrFd);
  const service = new Service(name, proc, stderrPath);
  const seen = [];
  const lines = readline.createInterface({ input: proc.stdout });
  const command = `${MEMGATE_BIN} ${args.join(' ')}`;
  service.url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      service.stop();
      reject(new Error(`${name}: no 'listening on' line within ${STARTUP_DEADLINE_MS / 1000}s\n`
        + `command: ${command}\nstdout: ${JSON.stringify(seen)}\nstderr:\n${service.stderr()}`));
    }, STARTUP_DEADLINE_MS);
    // Keeps reading stdout for the process's whole life, so it never blocks on a full pipe.
    lines.on('line', (line) => {
      seen.push(line);
      const match = LISTENING.exec(line);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    service.exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${code ?? signal}) before listening\ncommand: ${command}\n`
        + `stdout: ${JSON.stringify(seen)}\nstderr:\n${service.stderr()}`));
    });
  });
  return service;
}

export function startMockUpstream(workdir) {
  return startService('mock-upstream', ['mock-upstream', '--listen', '127.0.0.1:0'], workdir);
}

/**
 * `memgate serve` in front of `upstreamUrl`, with a fresh SQLite store and the admin API on.
 * `mode` is `passthrough` (callers' own keys) or `managed` (gateway keys; `upstreamKey` goes up).
 * The funnel gets a 10 s budget: these tests are about what is injected, on a debug build that
 * may share two cores with other work (the default 50 ms budget is for release builds).
 */
export async function startMemgate({ name, upstreamUrl, workdir, mode, adminToken, upstreamKey }) {
  const dir = path.join(workdir, name);
  fs.mkdirSync(dir);
  const config = path.join(dir, 'memgate.toml');
  fs.writeFileSync(config, '[memory]\nfunnel_timeout_ms = 10000\n');
  const env = {
    MEMGATE_ADMIN_TOKEN: adminToken,
    MEMGATE_DATABASE_URL: `sqlite://${path.join(dir, 'memgate.db')}`,
  };
  if (upstreamKey) env.ANTHROPIC_API_KEY = upstreamKey;
  return startService(name, ['serve', '--listen', '127.0.0.1:0', '--upstream-url', upstreamUrl,
    '--auth-mode', mode, '--config', config], workdir, env);
}

/** A JSON request to a loopback service; resolves to {status, headers, body} (body parsed when JSON). */
export function request(url, { method = 'GET', headers = {}, body } = {}) {
  const data = body === undefined ? undefined : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers: { ...(data ? { 'content-type': 'application/json', 'content-length': data.length } : {}), ...headers } }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let parsed = text;
        try {
          parsed = text ? JSON.parse(text) : null;
        } catch { /* not JSON: keep the text */ }
        resolve({ status: res.statusCode, headers: res.headers, body: parsed });
      });
    });
    req.setTimeout(60_000, () => req.destroy(new Error(`${method} ${url}: no answer within 60 s`)));
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

/** The admin API of one memgate, for one tenant. Throws on any non-2xx answer, with its body. */
export class Admin {
  constructor(service, token, tenant = 'default') {
    this.service = service;
    this.token = token;
    this.tenant = tenant;
  }

  async call(method, route, body) {
    const res = await request(`${this.service.url}/admin/v1${route}`, {
      method,
      body,
      headers: { authorization: `Bearer ${this.token}`, 'x-memory-tenant': this.tenant },
    });
    if (res.status < 200 || res.status >= 300) {
      throw new Error(`${method} /admin/v1${route} answered ${res.status}: ${JSON.stringify(res.body)}`);
    }
    return res.body;
  }
}

/** The mock's record of what it received (`/_mock/requests`, docs/mock-upstream.md). */
export class MockLog {
  constructor(service) {
    this.url = `${service.url}/_mock/requests`;
  }

  async clear() {
    const res = await request(this.url, { method: 'DELETE' });
    if (res.status !== 204) throw new Error(`DELETE /_mock/requests answered ${res.status}`);
  }

  async requests() {
    const res = await request(this.url);
    if (res.status !== 200) throw new Error(`GET /_mock/requests answered ${res.status}`);
    return res.body.requests;
  }
}

/**
 * A recording tee: a loopback HTTP server that forwards every request to `target` unchanged
 * (method, path with query, headers, body bytes) and relays the answer as it arrives (SSE is
 * not buffered). `exchanges` holds, in arrival order, what the client sent and the status and
 * headers it got back: the exact bytes a client sent, to compare with what the upstream received.
 */
export async function startTee(target) {
  const exchanges = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const exchange = { method: req.method, url: req.url, headers: { ...req.headers }, raw, body: null, status: null, responseHeaders: null };
      try {
        exchange.body = raw.length ? JSON.parse(raw.toString('utf8')) : null;
      } catch { /* not JSON */ }
      exchanges.push(exchange);
      const headers = { ...req.headers };
      delete headers.host;
      const upstream = http.request(new URL(req.url, target), { method: req.method, headers }, (up) => {
        exchange.status = up.statusCode;
        exchange.responseHeaders = up.headers;
        res.writeHead(up.statusCode, up.headers);
        up.pipe(res);
      });
      upstream.on('error', (err) => {
        exchange.status = 599;
        exchange.error = String(err);
        res.writeHead(502, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ type: 'error', error: { type: 'api_error', message: `tee: ${err}` } }));
      });
      upstream.end(raw);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    exchanges,
    close: () => new Promise((resolve) => {
      server.closeAllConnections?.();
      server.close(() => resolve());
    }),
  };
}

/**
 * The Claude Code executable. npm's postinstall copies the platform's native binary over
 * bin/claude.exe; when install scripts did not run, that file is a placeholder and the native
 * binary of the platform package is used directly.
 */
export function claudeBinary() {
  const modules = path.join(CLIENTS_DIR, 'node_modules', '@anthropic-ai');
  const wrapper = path.join(modules, 'claude-code', 'bin', 'claude.exe');
  if (fs.existsSync(wrapper) && fs.statSync(wrapper).size > 1_000_000) return wrapper;
  const arch = { x64: 'x64', arm64: 'arm64' }[process.arch];
  const native = path.join(modules, `claude-code-${process.platform}-${arch}`, 'claude');
  if (fs.existsSync(native)) return native;
  throw new Error(`Claude Code is not installed under ${modules}: run tests/clients/run.sh (npm ci)`);
}

export function claudeVersion() {
  return JSON.parse(fs.readFileSync(path.join(CLIENTS_DIR, 'node_modules', '@anthropic-ai', 'claude-code', 'package.json'), 'utf8')).version;
}

// What keeps headless Claude Code offline and quiet: no telemetry, error reports, auto-update,
// feedback survey or other non-essential traffic (the one switch that covers them all is
// CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC; the others are named for clarity).
export const CLAUDE_QUIET_ENV = {
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
  DISABLE_TELEMETRY: '1',
  DISABLE_ERROR_REPORTING: '1',
  DISABLE_AUTOUPDATER: '1',
  DISABLE_BUG_COMMAND: '1',
  CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY: '1',
};

/**
 * A throw-away workspace for Claude Code: `home` (its ~/.claude, sessions, settings) and
 * `project` (its working directory) holding a short CLAUDE.md, as a user's project would.
 */
export function claudeWorkspace(root, claudeMd) {
  const home = path.join(root, 'home');
  const project = path.join(root, 'project');
  fs.mkdirSync(home, { recursive: true });
  fs.mkdirSync(project, { recursive: true });
  if (claudeMd) fs.writeFileSync(path.join(project, 'CLAUDE.md'), claudeMd);
  return { home, project };
}

/**
 * Runs `claude -p <prompt> --output-format json [...extraArgs]` headless against `baseUrl` with
 * the environment above (unless `quiet` is false) and nothing else inherited but PATH. Resolves to
 * {code, signal, stdout, stderr, result} (`result` is the parsed JSON line, or null); kills it
 * after `timeoutMs`.
 */
export function runClaude({ baseUrl, apiKey, workspace, prompt, extraArgs = [], timeoutMs = 60_000, env = {}, quiet = true }) {
  const args = ['-p', prompt, '--output-format', 'json', ...extraArgs];
  const proc = spawn(claudeBinary(), args, {
    cwd: workspace.project,
    env: {
      PATH: process.env.PATH,
      HOME: workspace.home,
      TMPDIR: os.tmpdir(),
      ANTHROPIC_BASE_URL: baseUrl,
      ANTHROPIC_API_KEY: apiKey,
      ...(quiet ? CLAUDE_QUIET_ENV : {}),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (c) => { stdout += c; });
  proc.stderr.on('data', (c) => { stderr += c; });
  return new Promise((resolve) => {
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      proc.kill('SIGKILL');
    }, timeoutMs);
    // 'close', not 'exit': stdout is read to its end before the answer is parsed.
    proc.on('close', (code, signal) => {
      clearTimeout(timer);
      let result = null;
      try {
        result = JSON.parse(stdout.trim().split('\n').pop());
      } catch { /* not JSON: keep null */ }
      resolve({ code, signal, timedOut, stdout, stderr, result });
    });
  });
}
