// Canned records, keys, releases and requests for the mock: realistic enough to test the console
// against (every record type, both schema versions, expired / future / paused / archived records,
// one record that fails its schema after a change, records never injected).

import { random } from './random.mjs';

const H = 3600_000;
const D = 24 * H;
const iso = (ms) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
export { iso, H, D };

const FIRST = ['Li', 'Ana', 'Oleg', 'Maya', 'Kenji', 'Sofia', 'Omar', 'Ingrid', 'Ravi', 'Chen', 'Lucia', 'Tomas', 'Aisha', 'Pierre', 'Yuki', 'Mateo', 'Noor', 'Elena', 'Jonas', 'Priya'];
const LAST = ['Wei', 'Souza', 'Petrov', 'Cohen', 'Tanaka', 'Rossi', 'Haddad', 'Berg', 'Iyer', 'Jun', 'Garcia', 'Novak', 'Bello', 'Martin', 'Sato', 'Lopez', 'Khan', 'Ivanova', 'Weber', 'Nair'];
const LANGS = ['en', 'zh-CN', 'ru', 'pt-BR', 'ja', 'it', 'ar', 'de', 'fr', 'es'];
const ZONES = ['Asia/Shanghai', 'America/Sao_Paulo', 'Europe/Moscow', 'Europe/Berlin', 'Asia/Tokyo', 'Europe/Rome', 'Asia/Dubai', 'Europe/Paris', 'America/New_York', 'Asia/Kolkata'];
const REQUESTS = ['deliver after 5 pm only', 'no phone calls before 10:00', 'invoice in company name', 'leave parcels with the concierge', 'prefers refunds as store credit', 'send tracking links by SMS'];

/** The records of the default tenant, as stored (envelope + server fields). */
export function seedRecords(now) {
  const out = [];
  const add = (r) => {
    const created = r.created ?? now - (10 + out.length) * D;
    out.push({
      schema_version: 'v1', valid_from: iso(created), valid_until: '9999-12-31T23:59:59Z', priority: 3,
      aliases: [], metadata: { source: 'CRM_v4.2', updated_by: 'sales-bot-03' }, status: 'active',
      revision: 1, created_at: iso(created), updated_at: iso(created), last_accessed_at: null, access_count: 0,
      ...r, created: undefined,
    });
  };
  add({
    id: 'mem-cust-2024-0615-001', type: 'customer_profile', scope: ['team:sales', 'user:u-789'], priority: 4,
    key: 'customer:u-789:profile', aliases: ['下周发货', 'next week delivery'],
    content: { name: 'Li Wei', preferred_language: 'zh-CN', timezone: 'Asia/Shanghai', preferred_channel: 'chat', special_requests: ['deliver next week, not before Tuesday', 'call only between 10:00 and 18:00 China time'] },
    access_count: 148, last_accessed_at: iso(now - 4 * 60_000), revision: 3, updated_at: iso(now - 2 * D),
  });
  const rnd = random(7);
  for (let i = 0; i < 44; i++) {
    const subject = `u-${101 + i}`;
    const name = `${FIRST[i % FIRST.length]} ${LAST[(i * 7) % LAST.length]}`;
    const v2 = i % 5 === 0;
    const lang = LANGS[i % LANGS.length];
    const content = v2
      ? { name: { display_name: name, given_name: name.split(' ')[0], family_name: name.split(' ')[1] }, preferred_language: lang, tier: ['free', 'standard', 'premium', 'enterprise'][i % 4], contact: { email: `${name.split(' ')[0].toLowerCase()}@example.com`, preferred_channel: 'email' }, timezone: ZONES[i % ZONES.length] }
      : { name, preferred_language: lang, timezone: ZONES[i % ZONES.length], special_requests: [REQUESTS[i % REQUESTS.length]] };
    const accessed = rnd() < 0.7 ? Math.floor(rnd() * 90) + 1 : 0;
    add({
      id: `mem-cust-${String(1000 + i)}`, type: 'customer_profile', schema_version: v2 ? 'v2' : 'v1', scope: [`user:${subject}`],
      key: `customer:${subject}:profile`, priority: 4, content,
      access_count: accessed, last_accessed_at: accessed ? iso(now - Math.floor(rnd() * 20 * H)) : null,
      status: i === 13 ? 'paused' : i === 21 ? 'archived' : 'active',
    });
  }
  // Fails its schema since v1 became strict about `tier` (data health shows it).
  add({
    id: 'mem-cust-legacy-0042', type: 'customer_profile', scope: ['user:u-042'], key: 'customer:u-042:profile',
    content: { name: 'Dr. Ana Souza', preferred_language: 'pt-BR', tier: 'premium' }, metadata: { source: 'CRM_v3', updated_by: 'migration-2023' },
  });
  add({
    id: 'mem-sop-refund-001', type: 'internal_sop', scope: ['team:support'], priority: 5, key: 'sop:refund-over-500',
    aliases: ['refund over 500', 'large refund', '大额退款'],
    content: { title: 'Refund over 500 EUR', purpose: 'Large refunds need a second pair of eyes.', steps: '1. Check the order is delivered or lost in transit.\n2. Open a refund ticket with the order id.\n3. Ask team:billing to approve within 4 hours.\n4. Tell the customer the expected date.', owner_team: 'team:billing', escalation_contact: 'billing-lead@example.com', effective_date: '2024-03-01' },
    access_count: 412, last_accessed_at: iso(now - 9 * 60_000),
  });
  add({
    id: 'mem-sop-delay-002', type: 'internal_sop', schema_version: 'v2', scope: ['team:support'], priority: 5, key: 'sop:delivery-delay',
    aliases: ['late delivery', 'parcel delayed', 'посылка задерживается'],
    content: { title: 'Delivery delay over 3 days', applies_to: ['all'], steps: [{ action: 'Look up the carrier status', owner: 'agent', max_minutes: 5 }, { action: 'Offer a 10% voucher', owner: 'agent', condition: 'only if the delay is over 5 days' }, { action: 'Escalate to logistics', owner: 'team:logistics', max_minutes: 60 }] },
    access_count: 230, last_accessed_at: iso(now - 30 * 60_000),
  });
  add({
    id: 'mem-sop-premium-003', type: 'internal_sop', schema_version: 'v2', scope: ['team:support'], priority: 4, key: 'sop:premium-callback',
    content: { title: 'Premium callback', applies_to: ['tier:premium', 'tier:enterprise'], steps: [{ action: 'Offer a callback within 2 hours', owner: 'agent' }, { action: 'Book the slot in the CRM', owner: 'agent', max_minutes: 10 }] },
  });
  add({
    id: 'mem-prod-rtr-ax3000', type: 'product_spec', scope: ['public'], priority: 3, key: 'product:RTR-AX3000-BLK',
    aliases: ['AX3000', 'wifi 6 router'],
    content: { sku: 'RTR-AX3000-BLK', name: 'AX3000 Wi-Fi 6 Router (black)', category: 'networking', status: 'active', description: 'Dual-band Wi-Fi 6 router with four gigabit ports.', price: { amount: 129.9, currency: 'EUR' }, warranty_months: 24, attributes: { wifi: '802.11ax', ports: 4, mesh: true }, compatible_with: ['EXT-AX1800-WHT'], known_issues: ['firmware 1.0.3 drops 5 GHz clients after 48 h; update to 1.0.5'] },
    access_count: 87, last_accessed_at: iso(now - 2 * H),
  });
  add({
    id: 'mem-prod-ext-ax1800', type: 'product_spec', scope: ['public'], key: 'product:EXT-AX1800-WHT',
    content: { sku: 'EXT-AX1800-WHT', name: 'AX1800 Mesh Extender', category: 'networking', status: 'preorder', price: { amount: 59, currency: 'EUR' }, warranty_months: 24 },
  });
  add({
    id: 'mem-fact-0042', type: 'fact', scope: ['public'], priority: 2,
    content: { statement: 'Orders placed before 14:00 CET ship the same working day.', source: 'logistics handbook 2024', confidence: 0.95 },
    access_count: 61, last_accessed_at: iso(now - 50 * 60_000),
  });
  add({
    id: 'mem-fact-0043', type: 'fact', scope: ['public'],
    content: { statement: 'The warehouse in Leipzig is closed on public holidays in Saxony.', confidence: 0.9 },
  });
  add({
    id: 'mem-promo-summer', type: 'fact', scope: ['public'], priority: 3, key: 'promo:summer-sale',
    content: { statement: 'Summer sale: 15% off all routers with code SUMMER15.' },
    valid_from: iso(now - 40 * D), valid_until: iso(now - 5 * D), access_count: 310, last_accessed_at: iso(now - 5 * D - H),
  });
  add({
    id: 'mem-promo-winter', type: 'fact', scope: ['public'], priority: 3, key: 'promo:winter-sale',
    content: { statement: 'Winter sale: free extender with every AX3000 router.' },
    valid_from: iso(now + 12 * D), valid_until: iso(now + 40 * D),
  });
  add({
    id: 'mem-pref-u789-lang', type: 'preference', scope: ['user:u-789'], key: 'pref:u-789:language',
    content: { topic: 'language', preference: 'Answer in Simplified Chinese, keep English product names.', strength: 'must' },
    access_count: 140, last_accessed_at: iso(now - 4 * 60_000),
  });
  add({
    id: 'mem-decision-0007', type: 'decision', scope: ['team:support', 'team:sales'],
    content: { title: 'Vouchers instead of refunds for delays under 5 days', decision: 'Offer a 10% voucher; refund only on request.', rationale: 'Refund costs were 3x voucher costs in Q1.', decided_by: 'support leads', decided_on: '2024-04-02', status: 'accepted' },
  });
  add({
    id: 'mem-task-0311', type: 'task', scope: ['user:u-789', 'team:support'], key: 'task:ORD-2024-0311',
    content: { title: 'Confirm delivery slot for ORD-2024-0311', status: 'in_progress', assignee: 'agent:anna', due_date: '2024-06-18', reference: 'ORD-2024-0311', checklist: [{ item: 'call the carrier', done: true }, { item: 'message the customer', done: false }] },
    access_count: 12, last_accessed_at: iso(now - 6 * H),
  });
  add({
    id: 'mem-conv-88121', type: 'conversation_summary', scope: ['user:u-789'],
    content: { summary: 'Customer asked to move delivery to next week; agent confirmed Tuesday.', conversation_id: 'conv-88121', channel: 'chat', occurred_at: '2024-06-14T08:12:00Z', topics: ['delivery', 'scheduling'], outcome: 'resolved', sentiment: 'positive' },
    access_count: 40, last_accessed_at: iso(now - 3 * H),
  });
  add({
    id: 'mem-sop-old-returns', type: 'internal_sop', scope: ['team:support'], key: 'sop:returns-2022', status: 'archived',
    content: { title: 'Returns (2022 process)', steps: 'Superseded by the 2024 returns portal.' },
  });
  add({
    id: 'mem-fact-paused-01', type: 'fact', scope: ['public'], status: 'paused',
    content: { statement: 'Express shipping is suspended during the carrier strike.' },
  });
  return out;
}

export function seedAcmeRecords(now) {
  return [
    { id: 'mem-acme-001', type: 'fact', schema_version: 'v1', scope: ['public'], valid_from: iso(now - 30 * D), valid_until: '9999-12-31T23:59:59Z', priority: 3, aliases: [], metadata: {}, status: 'active', content: { statement: 'ACME support hours are 08:00-20:00 CET.' }, revision: 1, created_at: iso(now - 30 * D), updated_at: iso(now - 30 * D), last_accessed_at: null, access_count: 0 },
    { id: 'mem-acme-002', type: 'preference', schema_version: 'v1', scope: ['team:ops'], valid_from: iso(now - 20 * D), valid_until: '9999-12-31T23:59:59Z', priority: 2, aliases: [], metadata: {}, status: 'active', content: { topic: 'tone', preference: 'Short answers, bullet points.' }, revision: 1, created_at: iso(now - 20 * D), updated_at: iso(now - 20 * D), last_accessed_at: null, access_count: 0 },
  ];
}

export function seedKeys(now) {
  return [
    { id: 'k7f3a9', name: 'support-bot', scopes: ['team:support'], permissions: ['assert_subject'], rate_limit_per_minute: 1200, created_at: iso(now - 60 * D), revoked_at: null },
    { id: 'k19c2e', name: 'batch-worker', scopes: ['public'], permissions: ['batches', 'files'], rate_limit_per_minute: null, created_at: iso(now - 45 * D), revoked_at: null },
    { id: 'k4b8d0', name: 'qa-canary-tester', scopes: ['team:qa'], permissions: ['pin_release', 'debug'], rate_limit_per_minute: 60, created_at: iso(now - 20 * D), revoked_at: null },
    { id: 'k0aa11', name: 'old-sales-bot', scopes: ['team:sales'], permissions: [], rate_limit_per_minute: null, created_at: iso(now - 120 * D), revoked_at: iso(now - 90 * D) },
  ];
}

/** Release definitions (settings from config and templates) and their rollout history. */
export function seedReleases(now) {
  const guard = { enabled: true, window_secs: 60, min_calls: 20, max_error_rate: 0.2, promote_after_secs: 0 };
  const state = (stage, extra = {}) => ({ stage, canary_percent: 0, allow: { subjects: [], teams: [], cidrs: [] }, guard: { ...guard }, shadow_sample_percent: 0, note: null, stage_since_ms: now - 30 * D, ...extra });
  const releases = [
    { name: 'v1', schema_versions: ['v1'], similarity_threshold: 0.8, budget_tokens: 3000, max_items: 5, placement: 'auto', state: state('active') },
    { name: 'v2', schema_versions: ['v1', 'v2'], similarity_threshold: 0.78, budget_tokens: 2400, max_items: 5, placement: 'auto', state: state('shadow', { shadow_sample_percent: 10, stage_since_ms: now - 2 * H, note: 'token cost up 18% per call on the canary' }) },
    { name: 'v3-exp', schema_versions: ['v2'], similarity_threshold: 0.74, budget_tokens: 4000, max_items: 8, placement: 'last_user_turn', state: state('available') },
  ];
  const s = (stage, extra) => state(stage, extra);
  const history = {
    v1: [
      { action: 'promote', actor: 'console:alice', reason: 'first release', at: iso(now - 30 * D), before: s('available'), after: s('active') },
    ],
    v2: [
      { action: 'patch', actor: 'console:alice', reason: '', at: iso(now - 6 * H), before: s('available'), after: s('canary', { canary_percent: 5, stage_since_ms: now - 6 * H }) },
      { action: 'patch', actor: 'console:alice', reason: '', at: iso(now - 5 * H), before: s('canary', { canary_percent: 5 }), after: s('canary', { canary_percent: 20, stage_since_ms: now - 6 * H }) },
      { action: 'rollback', actor: 'console:bob', reason: 'token cost up 18% per call on the canary', at: iso(now - 3 * H), before: s('canary', { canary_percent: 20 }), after: s('available', { note: 'token cost up 18% per call on the canary' }) },
      { action: 'patch', actor: 'console:bob', reason: '', at: iso(now - 2 * H), before: s('available'), after: s('shadow', { shadow_sample_percent: 10, stage_since_ms: now - 2 * H }) },
    ],
    'v3-exp': [
      { action: 'patch', actor: 'admin', reason: '', at: iso(now - 9 * D), before: s('available'), after: s('canary', { canary_percent: 1 }) },
      { action: 'rollback', actor: 'guard', reason: 'guard: error rate 31.0% over 42 calls in the last 60 s is above 20.0%', at: iso(now - 9 * D + 20 * 60_000), before: s('canary', { canary_percent: 1 }), after: s('available') },
    ],
  };
  // The v2 canary's share of calls over the last day, for the generated history.
  const canaryShare = (name, t) => {
    if (name !== 'v2') return 0;
    if (t >= now - 6 * H && t < now - 5 * H) return 0.05;
    if (t >= now - 5 * H && t < now - 3 * H) return 0.2;
    return 0;
  };
  return { releases, history, canaryShare };
}

const QUERIES = [
  ['u-789', 'When will my order arrive? I asked for next week delivery.'],
  ['u-789', '我的订单什么时候到？我要求下周发货。'],
  ['u-104', 'My parcel delayed again, what can you do?'],
  ['u-117', 'Does the AX3000 router support mesh with the extender?'],
  ['u-122', 'I want a refund over 500 EUR for order ORD-2024-0377.'],
  ['u-131', 'Моя посылка задерживается уже неделю.'],
  ['u-108', 'Can I get a callback today? I am a premium customer.'],
  ['u-140', 'Is the summer sale code still valid?'],
];

export function queryPool() {
  return QUERIES;
}

export function messagesBody(query, i) {
  const cached = i % 3 === 0;
  return {
    model: i % 4 === 0 ? 'claude-haiku-4-5' : 'claude-sonnet-4-5',
    max_tokens: 600,
    stream: i % 2 === 0,
    system: cached
      ? [{ type: 'text', text: 'You are the support assistant of an online electronics shop. Be brief and kind.', cache_control: { type: 'ephemeral' } }]
      : 'You are the support assistant of an online electronics shop. Be brief and kind.',
    messages: [
      { role: 'user', content: 'Hi!' },
      { role: 'assistant', content: 'Hello! How can I help you today?' },
      { role: 'user', content: [{ type: 'text', text: query }] },
    ],
  };
}
