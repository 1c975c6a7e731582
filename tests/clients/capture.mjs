// Re-captures the fixtures in tests/data/clients/: what Claude Code and the official TypeScript
// SDK send to an Anthropic-compatible upstream (`memgate mock-upstream` answers), recorded by a
// tee in front of it so that every request keeps the client's own key order and values, sanitized.
//
//   node tests/clients/capture.mjs [--mock-url http://127.0.0.1:PORT] [--out DIR]
//
// Without --mock-url it starts `$MEMGATE_BIN mock-upstream` itself. Claude Code runs headless in
// a throw-away HOME and project folder (a short CLAUDE.md and notes.md, no git repository).
// Sanitized: the temp paths become /home/user and /home/user/acme-support, the device and session
// ids become fixed values, the API key a placeholder. Everything else is kept byte for byte.

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import Anthropic from '@anthropic-ai/sdk';

import {
  REPO, claudeVersion, claudeWorkspace, runClaude, startMockUpstream, startTee, tempDir,
} from './lib/services.mjs';

const args = process.argv.slice(2);
const option = (name) => {
  const at = args.indexOf(name);
  return at === -1 ? undefined : args[at + 1];
};
const OUT = path.resolve(option('--out') ?? path.join(REPO, 'tests', 'data', 'clients'));
const API_KEY = 'sk-ant-capture-placeholder';
const QUESTION = 'What is our refund policy?';
const FOLLOW_UP = 'And what about custom-made sofas?';
const CLAUDE_MD = '# Acme furniture support\n\nThis repository holds the support team\'s scripts. '
  + 'Answer customer questions briefly and politely.\n';
const NOTES = 'Refunds: 30 days from delivery, unused, in the original packaging. Custom-made items: repair or exchange only.\n';

const root = tempDir('memgate-capture-');
let mock;
let mockUrl = option('--mock-url');
if (!mockUrl) {
  mock = await startMockUpstream(root);
  mockUrl = mock.url;
}

// Fixed stand-ins for what differs per machine and run.
const HOME = '/home/user';
const PROJECT = '/home/user/acme-support';
const DEVICE_ID = '0'.repeat(64);
const sessionIds = new Map();
function sanitizer(workspace) {
  // Claude Code names a project's folder under ~/.claude/projects by its path with / and . as -.
  const encode = (p) => p.replace(/[/.]/g, '-');
  const pairs = [
    [workspace.project, PROJECT], [workspace.home, HOME],
    [encode(workspace.project), encode(PROJECT)], [encode(workspace.home), encode(HOME)],
  ];
  const fixText = (text) => {
    let out = text;
    for (const [from, to] of pairs) out = out.split(from).join(to);
    out = out.replace(/"device_id":"[0-9a-f]{64}"/g, `"device_id":"${DEVICE_ID}"`);
    out = out.replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, (id) => {
      if (!sessionIds.has(id)) sessionIds.set(id, `00000000-0000-4000-8000-${String(sessionIds.size + 1).padStart(12, '0')}`);
      return sessionIds.get(id);
    });
    return out;
  };
  const fix = (value) => {
    if (typeof value === 'string') return fixText(value);
    if (Array.isArray(value)) return value.map(fix);
    if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fix(v)]));
    return value;
  };
  // A tee exchange: the method, path and query, headers and body the client sent.
  return (exchange) => {
    const headers = { ...exchange.headers };
    if (headers['x-api-key']) headers['x-api-key'] = API_KEY;
    if (headers.authorization) headers.authorization = `Bearer ${API_KEY}`;
    delete headers.host;
    const [pathname, query] = exchange.url.split(/\?(.*)/s);
    return fix({ method: exchange.method, path: pathname, query: query ?? null, headers, body: exchange.body });
  };
}

function write(name, value) {
  fs.mkdirSync(OUT, { recursive: true });
  fs.writeFileSync(path.join(OUT, name), `${JSON.stringify(value, null, 2)}\n`);
  console.log(`wrote ${path.relative(REPO, path.join(OUT, name))}`);
}

async function claude(name, prompt, { workspace, extraArgs = [], env = {}, quiet = true, upstream = mockUrl } = {}) {
  const tee = await startTee(upstream);
  let run;
  try {
    run = await runClaude({ baseUrl: tee.url, apiKey: API_KEY, workspace, prompt, extraArgs, env, quiet });
  } finally {
    await tee.close();
  }
  const requests = tee.exchanges.map(sanitizer(workspace));
  console.log(`${name}: claude exited ${run.code}; ${requests.map((r) => `${r.method} ${r.path}${r.query ? `?${r.query}` : ''}`).join(', ')}`);
  if (run.code !== 0) console.log(`  stderr: ${run.stderr.slice(0, 500)}\n  stdout: ${run.stdout.slice(0, 500)}`);
  return { run, requests };
}

/**
 * A loopback stand-in that answers a Messages request holding no tool_result yet with a streamed
 * `tool_use` of Read(`filePath`), and forwards every other request to `mockUrl`.
 */
async function scriptedRead(upstream, filePath) {
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      let body = null;
      try { body = JSON.parse(raw.toString('utf8')); } catch { /* not JSON */ }
      const hasResult = (body?.messages ?? []).some((m) => Array.isArray(m.content) && m.content.some((b) => b.type === 'tool_result'));
      if (req.url.startsWith('/v1/messages?') && body?.stream && !hasResult) {
        const id = 'toolu_capture_read_1';
        const events = [
          ['message_start', { type: 'message_start', message: { id: 'msg_capture_1', type: 'message', role: 'assistant', model: body.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 } } }],
          ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id, name: 'Read', input: {} } }],
          ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: JSON.stringify({ file_path: filePath }) } }],
          ['content_block_stop', { type: 'content_block_stop', index: 0 }],
          ['message_delta', { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 10 } }],
          ['message_stop', { type: 'message_stop' }],
        ];
        res.writeHead(200, { 'content-type': 'text/event-stream', 'request-id': 'req_capture_1' });
        res.end(events.map(([name, data]) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`).join(''));
        return;
      }
      const headers = { ...req.headers };
      delete headers.host;
      const up = http.request(new URL(req.url, upstream), { method: req.method, headers }, (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
      });
      up.on('error', () => { res.writeHead(502); res.end(); });
      up.end(raw);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(() => r())) };
}

const messagesOf = (requests) => requests.filter((r) => r.path === '/v1/messages');
const withTools = (requests) => messagesOf(requests).filter((r) => (r.body?.tools ?? []).length > 0);

try {
  // 1. The main turn and a follow-up, as the tests run Claude Code (non-essential traffic off).
  const ws = claudeWorkspace(path.join(root, 'cc'), CLAUDE_MD);
  const main = await claude('main turn', QUESTION, { workspace: ws });
  write('claude_code_messages.json', withTools(main.requests).at(-1).body);
  write('claude_code_requests.json', main.requests.map(({ body, ...rest }) => ({ ...rest, body_keys: body && Object.keys(body) })));
  const follow = await claude('follow-up', FOLLOW_UP, { workspace: ws, extraArgs: ['--continue'] });
  write('claude_code_messages_follow_up.json', withTools(follow.requests).at(-1).body);

  // 2. With the default traffic setting Claude Code also asks a small request for a session title.
  const wsTitle = claudeWorkspace(path.join(root, 'cc-title'), CLAUDE_MD);
  const titled = await claude('default traffic', QUESTION, {
    workspace: wsTitle, quiet: false, env: { DISABLE_TELEMETRY: '1', DISABLE_AUTOUPDATER: '1', DISABLE_ERROR_REPORTING: '1' },
  });
  const title = messagesOf(titled.requests).find((r) => (r.body?.tools ?? []).length === 0);
  if (title) write('claude_code_title.json', title.body);

  // 3. A file attachment (@notes.md) and a tool loop: the mock's `mock-tool-use` model answers
  //    every turn with a tool_use of the first tool, so the second request carries a tool_result.
  const wsTool = claudeWorkspace(path.join(root, 'cc-tool'), CLAUDE_MD);
  fs.writeFileSync(path.join(wsTool.project, 'notes.md'), NOTES);
  const tooled = await claude('attachment and tool loop', `Summarize @notes.md for me: ${QUESTION}`, {
    workspace: wsTool, extraArgs: ['--model', 'mock-tool-use', '--max-turns', '2'],
  });
  const loop = withTools(tooled.requests);
  if (loop.length) write('claude_code_messages_tool_result.json', loop.at(-1).body);

  // 4. A tool loop that reads a file: the mock cannot choose a tool's input, so a scripted
  //    stand-in in front of it answers the first turn with a Read of policy.md; the next request
  //    (with the tool_result holding the file) goes on to the mock.
  const wsRead = claudeWorkspace(path.join(root, 'cc-read'), CLAUDE_MD);
  const policy = path.join(wsRead.project, 'policy.md');
  fs.writeFileSync(policy, NOTES);
  const scripted = await scriptedRead(mockUrl, policy);
  try {
    const read = await claude('read tool loop', `Read policy.md and tell me: ${QUESTION}`, { workspace: wsRead, upstream: scripted.url });
    write('claude_code_messages_read_result.json', withTools(read.requests).at(-1).body);
  } finally {
    await scripted.close();
  }

  // 5. The TypeScript SDK: a plain create and a stream.
  const tee = await startTee(mockUrl);
  const client = new Anthropic({ baseURL: tee.url, apiKey: API_KEY, maxRetries: 0 });
  try {
    await client.messages.create({
      model: 'claude-mock-1', max_tokens: 64, system: 'You are the support assistant of an online furniture shop.',
      messages: [{ role: 'user', content: QUESTION }],
    });
    await client.messages.stream({
      model: 'claude-mock-1', max_tokens: 64, system: 'You are the support assistant of an online furniture shop.',
      messages: [{ role: 'user', content: QUESTION }],
    }).finalMessage();
  } finally {
    await tee.close();
  }
  const sdk = tee.exchanges.map(sanitizer({ project: '/nonexistent', home: '/nonexistent' }));
  write('ts_sdk_create.json', sdk[0]);
  write('ts_sdk_stream.json', sdk[1]);

  const sdkVersion = JSON.parse(fs.readFileSync(path.join(path.dirname(new URL(import.meta.url).pathname), 'node_modules', '@anthropic-ai', 'sdk', 'package.json'), 'utf8')).version;
  console.log(`Claude Code ${claudeVersion()}, @anthropic-ai/sdk ${sdkVersion}`);
} finally {
  await mock?.stop();
  if (!process.env.MEMGATE_CLIENTS_KEEP) fs.rmSync(root, { recursive: true, force: true });
}
