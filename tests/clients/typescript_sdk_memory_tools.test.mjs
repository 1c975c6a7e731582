// memgate's memory tools through the official TypeScript SDK (npm @anthropic-ai/sdk): a key with
// `memory_write_tools`, the mock upstream's model calling `memory_add` and `memory_search` as a
// model would, and what the SDK makes of the answer: one message, none of memgate's tool blocks,
// streaming (`messages.stream(...).finalMessage()` and the events the SDK saw) and not.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, test } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';

import { Admin, MockLog, startMemgate, startMockUpstream, tempDir } from './lib/services.mjs';

const ADMIN_TOKEN = 'clients-tools-admin-token-0123456789';
const UPSTREAM_KEY = 'sk-ant-clients-tools-0123456789';
const MODEL = 'claude-mock-1';
const SUBJECT = 'u-ts-tools';
const MEMGATE_TOOLS = new Set(['memory_search', 'memory_get', 'memory_list', 'memory_add', 'memory_update', 'memory_delete']);

let workdir;
let mock;
let gateway;
let admin;
let mockLog;
let agent;

before(async () => {
  workdir = tempDir('memgate-clients-tools-');
  mock = await startMockUpstream(workdir);
  gateway = await startMemgate({
    name: 'memgate-serve-ts-tools', upstreamUrl: mock.url, workdir, mode: 'managed', adminToken: ADMIN_TOKEN, upstreamKey: UPSTREAM_KEY,
  });
  admin = new Admin(gateway, ADMIN_TOKEN);
  agent = await admin.call('POST', '/keys', { name: 'agent', scopes: [], permissions: ['memory_write_tools', 'assert_subject'] });
  mockLog = new MockLog(mock);
});

after(async () => {
  await gateway?.stop();
  await mock?.stop();
  if (workdir && !process.env.MEMGATE_CLIENTS_KEEP) fs.rmSync(workdir, { recursive: true, force: true });
});

function client() {
  return new Anthropic({
    baseURL: gateway.url, apiKey: agent.key, maxRetries: 0, timeout: 30_000, defaultHeaders: { 'X-Memory-Subject': SUBJECT },
  });
}

async function messagesRequests() {
  return (await mockLog.requests()).filter((r) => r.path === '/v1/messages');
}

test('TypeScript SDK messages.create: a remembered fact is stored by its author and the SDK gets one message', async () => {
  await mockLog.clear();
  const message = await client().messages.create({
    model: MODEL, max_tokens: 256, messages: [{ role: 'user', content: 'Remember that the office plant is called Fernando.' }],
  });
  assert.deepEqual(message.content.map((b) => b.type), ['text', 'text'], JSON.stringify(message.content));
  assert.ok(message.content[1].text.startsWith('From memory: Saved as mem-'), message.content[1].text);
  assert.equal(message.stop_reason, 'end_turn');
  assert.equal((await messagesRequests()).length, 2, 'memgate ran one tool round upstream');
  const records = (await admin.call('GET', `/memories?scope=user:${SUBJECT}`)).data;
  assert.deepEqual(records.map((r) => r.author), [`agent:${agent.id}`]);
});

test('TypeScript SDK messages.stream: a search answered from memory streams as one coherent message', async () => {
  await client().messages.create({
    model: MODEL, max_tokens: 256, messages: [{ role: 'user', content: 'Remember that my locker number is 42.' }],
  });
  await mockLog.clear();
  const stream = client().messages.stream({
    model: MODEL, max_tokens: 256, messages: [{ role: 'user', content: 'What is my locker number?' }],
  });
  const events = [];
  stream.on('streamEvent', (event) => events.push(event));
  const final = await stream.finalMessage();
  const kinds = events.map((e) => e.type);
  assert.equal(kinds.filter((k) => k === 'message_start').length, 1, kinds.join(','));
  assert.equal(kinds.filter((k) => k === 'message_stop').length, 1, kinds.join(','));
  const starts = events.filter((e) => e.type === 'content_block_start').map((e) => e.index);
  assert.deepEqual(starts, starts.map((_, i) => i), 'block indices run from 0 without a gap');
  assert.ok(events.every((e) => e.type !== 'content_block_start' || e.content_block.type !== 'tool_use'
    || !MEMGATE_TOOLS.has(e.content_block.name)), 'none of memgate\'s tool calls reach the client');
  assert.deepEqual(final.content.map((b) => b.type), ['text', 'text'], JSON.stringify(final.content));
  assert.ok(final.content[1].text.includes('locker number is 42'), final.content[1].text);
  assert.equal(final.stop_reason, 'end_turn');
  assert.equal((await messagesRequests()).length, 2);
});
