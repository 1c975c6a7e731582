// The official TypeScript SDK (npm @anthropic-ai/sdk) through memgate in managed mode: a support
// bot's gateway key that may name the customer it serves (X-Memory-Subject), non-streaming and
// streaming Messages, memgate's headers on the SDK's raw response, and memgate's own refusals
// surfacing as the SDK's typed errors.
//
// Note: this SDK sends its key as `Authorization: Bearer <key>` (not `x-api-key`), so these tests
// also prove memgate takes a gateway key that way.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, test } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';

import { memoryBlocks, recordLines } from './lib/prompt.mjs';
import { Admin, MockLog, startMemgate, startMockUpstream, tempDir } from './lib/services.mjs';

const ADMIN_TOKEN = 'clients-admin-token-0123456789abcdef';
const UPSTREAM_KEY = 'sk-ant-clients-upstream-0123456789';
const MODEL = 'claude-mock-1'; // the model the mock lists
const SYSTEM = 'You are the support assistant of an online furniture shop.';
const SUBJECT = 'u-100';

const RECORDS = [
  {
    id: 'ts-order-u100',
    type: 'conversation_summary',
    scope: [`user:${SUBJECT}`],
    priority: 4,
    content: {
      summary: 'The customer\'s walnut bookcase (order ORD-7781) left our warehouse late; the carrier now delivers it on Thursday between 9:00 and 13:00.',
      channel: 'chat',
      outcome: 'pending',
    },
  },
  {
    // The same topic for another customer: never visible to u-100.
    id: 'ts-order-u200',
    type: 'conversation_summary',
    scope: ['user:u-200'],
    priority: 4,
    content: {
      summary: 'The customer\'s oak bookcase (order ORD-9902) is delayed; the carrier now delivers it next Monday.',
      channel: 'email',
      outcome: 'pending',
    },
  },
  {
    id: 'ts-grinder-spec',
    type: 'product_spec',
    scope: ['public'],
    content: { sku: 'GRND-200', name: 'Burr coffee grinder', description: 'Conical steel burrs with 40 grind settings.' },
  },
];
const QUESTION = 'Hi, when will my bookcase be delivered?';

let workdir;
let mock;
let gateway;
let mockLog;
let botKey;
let plainKey;

before(async () => {
  workdir = tempDir('memgate-clients-ts-');
  mock = await startMockUpstream(workdir);
  gateway = await startMemgate({
    name: 'memgate-serve-ts', upstreamUrl: mock.url, workdir, mode: 'managed', adminToken: ADMIN_TOKEN, upstreamKey: UPSTREAM_KEY,
  });
  const admin = new Admin(gateway, ADMIN_TOKEN);
  for (const record of RECORDS) await admin.call('POST', '/memories', record);
  botKey = (await admin.call('POST', '/keys', { name: 'support-bot', scopes: ['team:support'], permissions: ['assert_subject'] })).key;
  plainKey = (await admin.call('POST', '/keys', { name: 'plain-app', scopes: ['team:support'], permissions: [] })).key;
  mockLog = new MockLog(mock);
});

after(async () => {
  await gateway?.stop();
  await mock?.stop();
  if (workdir && !process.env.MEMGATE_CLIENTS_KEEP) fs.rmSync(workdir, { recursive: true, force: true });
});

function client(apiKey) {
  return new Anthropic({ baseURL: gateway.url, apiKey, maxRetries: 0, timeout: 30_000 });
}

const params = { model: MODEL, max_tokens: 64, system: SYSTEM, messages: [{ role: 'user', content: QUESTION }] };

/** The record ids of the one memory block the upstream received last, and its body. */
async function injectedUpstream() {
  const requests = (await mockLog.requests()).filter((r) => r.path === '/v1/messages');
  assert.equal(requests.length, 1, `the upstream received ${requests.length} Messages requests`);
  const { body, headers } = requests[0];
  const credential = headers['x-api-key'] ?? headers.authorization;
  assert.ok(credential === UPSTREAM_KEY || credential === `Bearer ${UPSTREAM_KEY}`,
    `the upstream must get memgate's own key, got ${credential}`);
  assert.ok(!JSON.stringify(headers).includes(botKey), 'the gateway key must not reach the upstream');
  const blocks = memoryBlocks(body);
  assert.equal(blocks.length, 1, `expected one <MEMORY_CONTEXT> block upstream, got ${blocks.length}`);
  return recordLines(blocks[0].block.text).map((line) => line.id);
}

function memoryHeaders(response) {
  return {
    injected: response.headers.get('x-memory-injected'),
    status: response.headers.get('x-memory-status'),
    version: response.headers.get('x-memory-version'),
    requestId: response.headers.get('x-memory-request-id'),
  };
}

test('TypeScript SDK messages.create: the customer\'s record is injected and memgate\'s headers reach the SDK', async () => {
  await mockLog.clear();
  const { data, response } = await client(botKey).messages
    .create(params, { headers: { 'X-Memory-Subject': SUBJECT } })
    .withResponse();
  assert.equal(data.type, 'message');
  assert.ok(data.content[0].text.startsWith('Hello from mock-upstream'), JSON.stringify(data.content));
  const headers = memoryHeaders(response);
  assert.equal(headers.status, 'ok', JSON.stringify(headers));
  assert.equal(headers.injected, '1', JSON.stringify(headers));
  assert.ok(headers.version && headers.requestId, JSON.stringify(headers));
  assert.deepEqual(await injectedUpstream(), ['ts-order-u100']);
});

test('TypeScript SDK messages.stream: the same record, the headers, and the same message as without streaming', async () => {
  await mockLog.clear();
  const stream = client(botKey).messages.stream(params, { headers: { 'X-Memory-Subject': SUBJECT } });
  const { response } = await stream.withResponse();
  const events = [];
  stream.on('streamEvent', (event) => events.push(event.type));
  const message = await stream.finalMessage();
  assert.equal(response.headers.get('content-type')?.split(';')[0], 'text/event-stream');
  const headers = memoryHeaders(response);
  assert.equal(headers.status, 'ok', JSON.stringify(headers));
  assert.equal(headers.injected, '1', JSON.stringify(headers));
  assert.equal(message.stop_reason, 'end_turn');
  assert.ok(events.includes('message_start') && events.includes('content_block_delta') && events.at(-1) === 'message_stop', events.join(','));
  assert.deepEqual(await injectedUpstream(), ['ts-order-u100']);

  // The mock answers a body with the same id streamed or not: memgate injected the same block.
  await mockLog.clear();
  const plain = await client(botKey).messages.create(params, { headers: { 'X-Memory-Subject': SUBJECT } });
  assert.equal(message.id, plain.id, 'streamed and non-streamed requests reached the upstream with different bodies');
  assert.equal(message.content[0].text, plain.content[0].text);
});

test('TypeScript SDK: a key without assert_subject naming a customer gets PermissionDeniedError (403), and nothing goes upstream', async () => {
  await mockLog.clear();
  await assert.rejects(
    client(plainKey).messages.create(params, { headers: { 'X-Memory-Subject': SUBJECT } }),
    (err) => {
      assert.ok(err instanceof Anthropic.PermissionDeniedError, `expected PermissionDeniedError, got ${err?.constructor?.name}: ${err}`);
      assert.equal(err.status, 403);
      assert.equal(err.error?.type, 'error');
      assert.equal(err.error?.error?.type, 'permission_error');
      assert.match(err.error?.error?.message ?? '', /assert_subject/);
      return true;
    },
  );
  await assert.rejects(
    client(plainKey).messages.stream(params, { headers: { 'X-Memory-Subject': SUBJECT } }).finalMessage(),
    (err) => err instanceof Anthropic.PermissionDeniedError && err.status === 403,
  );
  assert.deepEqual((await mockLog.requests()).filter((r) => r.path === '/v1/messages'), []);
});

test('TypeScript SDK: an unknown gateway key gets AuthenticationError (401)', async () => {
  await assert.rejects(
    client('mgk_not-a-real-key-0123456789').messages.create(params),
    (err) => err instanceof Anthropic.AuthenticationError && err.status === 401 && err.error?.error?.type === 'authentication_error',
  );
});
