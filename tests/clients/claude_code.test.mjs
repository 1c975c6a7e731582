// Claude Code (npm @anthropic-ai/claude-code, headless `claude -p`) through memgate.
//
// Claude Code puts its own text into the user turn beside the person's question: a
// `<system-reminder>` block with CLAUDE.md and the date, then the question (the block that
// carries the last cache breakpoint), then a mid-conversation `system` message listing agents and
// skills (tests/data/clients/README.md shows the anatomy). memgate must match the question, not
// the harness, inject the record after Claude Code's last breakpoint without touching any of
// its blocks, and Claude Code must finish its turn on the answer.
//
// memgate runs in passthrough mode (the quick start a new user tries: Claude Code keeps its own
// key; only `public` records of the default tenant are visible). Between Claude Code and memgate
// sits a recording tee, so what Claude Code sent can be compared block by block with what the
// stand-in upstream received.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import {
  breakpoints, firstDifference, memoryBlocks, outline, recordLines, withoutBlock,
} from './lib/prompt.mjs';
import {
  Admin, MockLog, claudeVersion, claudeWorkspace, request, runClaude, startMemgate, startMockUpstream, startTee, tempDir,
} from './lib/services.mjs';

const ADMIN_TOKEN = 'clients-admin-token-0123456789abcdef';
const CLAUDE_KEY = 'sk-ant-clients-claude-code-0123456789';
const QUESTION = 'What is our refund policy?';
const FOLLOW_UP = 'And what about custom-made sofas?';
// A short project memory, as most projects have: it shows up in the harness's system-reminder.
const CLAUDE_MD = '# Acme furniture support\n\nThis repository holds the support team\'s scripts. '
  + 'Answer customer questions briefly and politely.\n';

const REFUND = 'cc-refund-policy';
// No aliases: the record must be found by the meaning of the question, not by a phrase the
// question happens to contain (an alias named in the query passes the funnel without a score).
const RECORDS = [
  {
    id: REFUND,
    type: 'internal_sop',
    scope: ['public'],
    key: 'policy:refunds',
    content: {
      title: 'Refund policy',
      purpose: 'What customers get back when they return something they bought from us.',
      steps: '1. Unused items in their original packaging can be returned within 30 days of delivery for a full refund.\n'
        + '2. The money goes back to the original payment method within 5 business days of the return reaching our warehouse.\n'
        + '3. Custom-made furniture cannot be refunded; we repair or exchange it instead.',
      owner_team: 'Customer Care',
    },
  },
  {
    id: 'cc-grinder-spec',
    type: 'product_spec',
    scope: ['public'],
    content: {
      sku: 'GRND-200',
      name: 'Burr coffee grinder',
      category: 'Kitchen',
      description: 'Conical steel burrs with 40 grind settings and a 250 g bean hopper.',
    },
  },
  {
    // Close to what the harness talks about (agents, skills, code review, git): a query made of
    // the harness finds this one instead of the refund policy.
    id: 'cc-engineering-workflow',
    type: 'fact',
    scope: ['public'],
    content: {
      statement: 'Engineers run the code-review skill and check git status before every commit; '
        + 'agents may edit files only in their own git worktree.',
    },
  },
];
const UNRELATED = RECORDS.map((r) => r.id).filter((id) => id !== REFUND);

let workdir;
let mock;
let gateway;
let admin;
let mockLog;

before(async () => {
  workdir = tempDir('memgate-clients-cc-');
  mock = await startMockUpstream(workdir);
  gateway = await startMemgate({ name: 'memgate-serve-cc', upstreamUrl: mock.url, workdir, mode: 'passthrough', adminToken: ADMIN_TOKEN });
  admin = new Admin(gateway, ADMIN_TOKEN);
  for (const record of RECORDS) await admin.call('POST', '/memories', record);
  mockLog = new MockLog(mock);
});

after(async () => {
  await gateway?.stop();
  await mock?.stop();
  if (workdir && !process.env.MEMGATE_CLIENTS_KEEP) fs.rmSync(workdir, { recursive: true, force: true });
});

/** The services' stderr tails, for failure messages. */
function serviceLogs() {
  return [mock, gateway].filter(Boolean)
    .map((s) => `--- ${s.name} stderr (tail) ---\n${s.stderr().slice(-3000)}`).join('\n');
}

function describeRun(run) {
  return `claude exited with ${run.code ?? run.signal}${run.timedOut ? ' (killed after the timeout)' : ''}\n`
    + `stdout: ${run.stdout.slice(0, 2000)}\nstderr: ${run.stderr.slice(0, 2000)}\n${serviceLogs()}`;
}

/** Claude Code must have finished its turn on the mock's answer. */
function assertFinished(run, prompt) {
  assert.equal(run.code, 0, `Claude Code did not finish its turn: ${describeRun(run)}`);
  assert.ok(run.result, `Claude Code printed no JSON result: ${describeRun(run)}`);
  assert.equal(run.result.is_error, false, `Claude Code reported an error: ${JSON.stringify(run.result)}`);
  assert.equal(run.result.subtype, 'success', JSON.stringify(run.result));
  // The mock echoes the last user text block: the question, or the memory block after it.
  assert.ok(run.result.result.startsWith('Hello from mock-upstream'),
    `the answer to "${prompt}" is not the mock's: ${JSON.stringify(run.result.result)}`);
}

/**
 * Pairs what Claude Code sent to memgate (through the tee) with what the mock received, for every
 * Messages request, in order; checks the path and query went through unchanged.
 */
async function messagesPairs(tee) {
  const sent = tee.exchanges.filter((e) => e.method === 'POST' && e.url.split('?')[0] === '/v1/messages');
  const received = (await mockLog.requests()).filter((r) => r.method === 'POST' && r.path === '/v1/messages');
  assert.ok(sent.length >= 1, `Claude Code sent no POST /v1/messages; it sent: ${tee.exchanges.map((e) => `${e.method} ${e.url}`).join(', ')}`);
  assert.equal(received.length, sent.length,
    `Claude Code sent ${sent.length} Messages requests, the upstream received ${received.length}\n${serviceLogs()}`);
  return sent.map((s, i) => {
    const query = s.url.includes('?') ? s.url.slice(s.url.indexOf('?') + 1) : null;
    assert.equal(received[i].query, query, 'the query string (?beta=true) must reach the upstream unchanged');
    return { sent: s, received: received[i] };
  });
}

/**
 * Why nothing (or the wrong thing) was injected, from memgate itself: `POST /admin/v1/explain` on
 * the exact body Claude Code sent, as a passthrough caller (public records) would get it.
 */
async function explainFor(body) {
  try {
    const answer = await admin.call('POST', '/explain', { request: body });
    const { request: _request, block: _block, ...rest } = answer;
    const text = JSON.stringify(rest);
    return text.length > 3000 ? `${text.slice(0, 3000)}…` : text;
  } catch (err) {
    return `(explain failed: ${err.message})`;
  }
}

/**
 * The checks on one Messages request of Claude Code's main turn:
 * - exactly one `<MEMORY_CONTEXT` block reached the upstream, with the refund policy and none of
 *   the unrelated records;
 * - without that block, the upstream got exactly what Claude Code sent: every block in its order
 *   and bytes, every cache_control breakpoint on the same block, none added;
 * - the block carries no breakpoint and comes after Claude Code's last breakpoint.
 */
async function assertRefundInjectedAfterLastBreakpoint({ sent, received }, prompt) {
  const headers = sent.responseHeaders ?? {};
  const memoryHeaders = `x-memory-status: ${headers['x-memory-status']}, x-memory-injected: ${headers['x-memory-injected']}`;
  const found = memoryBlocks(received.body);
  if (found.length === 0) {
    assert.fail(`no <MEMORY_CONTEXT> block reached the upstream for "${prompt}" (${memoryHeaders}).\n`
      + `The request Claude Code sent: ${outline(sent.body)}\n`
      + `memgate's explain for it: ${await explainFor(sent.body)}`);
  }
  assert.equal(found.length, 1, `more than one memory block: ${found.map((f) => f.path).join(', ')}`);
  const [memory] = found;
  const ids = recordLines(memory.block.text).map((line) => line.id);
  if (!ids.includes(REFUND) || ids.some((id) => UNRELATED.includes(id))) {
    assert.fail(`for "${prompt}" memgate injected [${ids.join(', ')}]; expected ${REFUND} and none of `
      + `[${UNRELATED.join(', ')}] (${memoryHeaders}).\nmemgate's explain for it: ${await explainFor(sent.body)}`);
  }
  assert.equal(headers['x-memory-status'], 'ok', memoryHeaders);
  assert.equal(headers['x-memory-injected'], String(ids.length), memoryHeaders);

  const diff = firstDifference(sent.body, withoutBlock(received.body, memory.path));
  assert.equal(diff, null, diff && `apart from the memory block at ${memory.path}, the upstream request differs from what `
    + `Claude Code sent, first at ${diff.path}:\n  sent:     ${diff.left}\n  received: ${diff.right}\n`
    + `sent:     ${outline(sent.body)}\nreceived: ${outline(received.body)}`);

  assert.equal(memory.block.cache_control, undefined, 'the memory block must not carry a cache breakpoint');
  const clientBreakpoints = breakpoints(sent.body);
  assert.ok(clientBreakpoints.length > 0, `Claude Code set no cache breakpoint: ${outline(sent.body)}`);
  const last = breakpoints(received.body).at(-1);
  assert.ok(memory.index > last.index, `the memory block (${memory.path}) is in front of Claude Code's last breakpoint `
    + `(${last.path}): ${outline(received.body)}`);
  assert.deepEqual(breakpoints(received.body).map((b) => b.path), clientBreakpoints.map((b) => b.path),
    'the breakpoints must sit on the same blocks as Claude Code set them');
}

test('control: the question alone, as a plain client sends it, gets the refund policy and nothing else', async () => {
  // Proves the records and the release's threshold fit the question, so that a Claude Code test
  // failing below fails because of what Claude Code adds around the question.
  await mockLog.clear();
  const res = await request(`${gateway.url}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': CLAUDE_KEY, 'anthropic-version': '2023-06-01' },
    body: { model: 'claude-mock-1', max_tokens: 64, messages: [{ role: 'user', content: QUESTION }] },
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.headers['x-memory-injected'], '1', JSON.stringify(res.headers));
  // Skip memgate's one check of a new passthrough key (GET /v1/models) before its first request.
  const received = (await mockLog.requests()).find((r) => r.path === '/v1/messages');
  const blocks = memoryBlocks(received.body);
  assert.equal(blocks.length, 1, JSON.stringify(received.body));
  assert.deepEqual(recordLines(blocks[0].block.text).map((line) => line.id), [REFUND]);
});

test(`Claude Code ${claudeVersion()} straight at the mock upstream finishes its turn`, async () => {
  const workspace = claudeWorkspace(path.join(workdir, 'cc-direct'), CLAUDE_MD);
  await mockLog.clear();
  const run = await runClaude({ baseUrl: mock.url, apiKey: CLAUDE_KEY, workspace, prompt: QUESTION });
  assertFinished(run, QUESTION);
  const messages = (await mockLog.requests()).filter((r) => r.path === '/v1/messages');
  assert.ok(messages.length >= 1, 'the mock received no Messages request');
  assert.equal(messages.at(-1).query, 'beta=true');
});

test('Claude Code through memgate: the refund policy, after its last cache breakpoint, and the turn finishes', async () => {
  const workspace = claudeWorkspace(path.join(workdir, 'cc-memgate'), CLAUDE_MD);
  const tee = await startTee(gateway.url);
  await mockLog.clear();
  let run;
  try {
    run = await runClaude({ baseUrl: tee.url, apiKey: CLAUDE_KEY, workspace, prompt: QUESTION });
  } finally {
    await tee.close();
  }
  assertFinished(run, QUESTION);
  const pairs = await messagesPairs(tee);
  // The agent turn is the request with Claude Code's tools (a title request, when made, has none).
  const main = pairs.filter((p) => (p.sent.body.tools ?? []).length > 0).at(-1);
  assert.ok(main, `no Messages request with tools among ${pairs.length}`);
  await assertRefundInjectedAfterLastBreakpoint(main, QUESTION);
});

// The follow-up turn carries no reminder, only the bare words; alone they are too far from the
// record (similarity ~0.17 under v1's 0.20), so this needs the query rule that adds the
// previous user words to a bare follow-up.
test('Claude Code through memgate, a bare follow-up (--continue): the refund policy again, after the last breakpoint', async () => {
  const workspace = claudeWorkspace(path.join(workdir, 'cc-follow-up'), CLAUDE_MD);
  const tee = await startTee(gateway.url);
  let first;
  let second;
  try {
    first = await runClaude({ baseUrl: tee.url, apiKey: CLAUDE_KEY, workspace, prompt: QUESTION });
    assertFinished(first, QUESTION);
    tee.exchanges.length = 0;
    await mockLog.clear();
    second = await runClaude({ baseUrl: tee.url, apiKey: CLAUDE_KEY, workspace, prompt: FOLLOW_UP, extraArgs: ['--continue'] });
  } finally {
    await tee.close();
  }
  assertFinished(second, FOLLOW_UP);
  const main = (await messagesPairs(tee)).filter((p) => (p.sent.body.tools ?? []).length > 0).at(-1);
  const users = main.sent.body.messages.filter((m) => m.role === 'user');
  assert.ok(users.length >= 2, `--continue did not carry the first turn: ${outline(main.sent.body)}`);
  await assertRefundInjectedAfterLastBreakpoint(main, FOLLOW_UP);
});

// memgate's memory tools under Claude Code: a managed gateway key with `memory_write_tools` (sent
// by Claude Code as its API key), the mock's model calling `memory_add` for "remember that …".
// memgate runs the call inside the turn; Claude Code sees one answer and finishes, and the record
// is stored in the key's own scope with the key as its author.
test('Claude Code through memgate with memory tools: "remember that …" is stored by the agent and the turn finishes', async () => {
  const managed = await startMemgate({
    name: 'memgate-serve-cc-tools', upstreamUrl: mock.url, workdir, mode: 'managed', adminToken: ADMIN_TOKEN,
    upstreamKey: 'sk-ant-clients-cc-tools-upstream-0123',
  });
  try {
    const managedAdmin = new Admin(managed, ADMIN_TOKEN);
    const key = await managedAdmin.call('POST', '/keys', { name: 'claude-code', scopes: [], permissions: ['memory_write_tools'] });
    const workspace = claudeWorkspace(path.join(workdir, 'cc-tools'), CLAUDE_MD);
    const prompt = 'Remember that this repository deploys with pnpm.';
    await mockLog.clear();
    const run = await runClaude({ baseUrl: managed.url, apiKey: key.key, workspace, prompt });
    assert.equal(run.code, 0, `Claude Code did not finish its turn: ${describeRun(run)}`);
    assert.equal(run.result?.is_error, false, JSON.stringify(run.result));
    assert.ok(run.result.result.includes('Saved as mem-'), `the answer does not quote memgate's tool result: ${JSON.stringify(run.result.result)}`);
    const records = (await managedAdmin.call('GET', `/memories?scope=agent:${key.id}`)).data;
    assert.equal(records.length, 1, JSON.stringify(records));
    assert.equal(records[0].author, `agent:${key.id}`);
    assert.ok(JSON.stringify(records[0].content).includes('pnpm'), JSON.stringify(records[0].content));
  } finally {
    await managed.stop();
  }
});
