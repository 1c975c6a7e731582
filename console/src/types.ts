// Shapes of what memgate answers (API.md, and src/admin/*.rs for the existing endpoints).

import type { Problem } from './api';

export type Role = 'admin' | 'viewer';

export interface Session {
  authenticated: true;
  role: Role;
  actor: string;
  tenants: string[];
  expires_at: string;
  idle_timeout_secs: number;
}

export type Status = 'active' | 'paused' | 'archived' | 'proposed' | 'dormant';

export interface MemoryRecord {
  id: string;
  type: string;
  schema_version: string;
  scope: string[];
  valid_from: string;
  valid_until: string;
  priority: number;
  key?: string;
  aliases: string[];
  content: unknown;
  metadata: Record<string, unknown>;
  status: Status;
  tenant: string;
  revision: number;
  created_at: string;
  updated_at: string;
  last_accessed_at: string | null;
  access_count: number;
  /** Who wrote the live version: `admin:<actor>`, `console:<actor>`, `agent:<key id>`, `observer`. */
  author?: string;
  /** Where an extracted record came from (request id, release, model), when it says. */
  provenance?: Record<string, unknown>;
}

/** One id's answer in a bulk review call. */
export interface ReviewResult {
  id: string;
  ok: boolean;
  status?: string;
  deleted?: boolean;
  error?: { message: string; code: string };
}

export interface Change {
  revision?: number;
  action: string;
  actor: string;
  reason?: string;
  at: string;
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
}

export interface Errors {
  upstream: number;
  memory: number;
  rate_limited: number;
  client: number;
}

export interface MemoryCounts {
  ok: number;
  skipped: number;
  degraded: number;
}

export interface Figures {
  calls: number;
  errors: Errors;
  memory: MemoryCounts;
  injected_records: number;
  injected_tokens: number;
  visible_tokens: number;
  added_latency_ms: { p50: number; p99: number };
}

export interface Bucket extends Figures {
  t: string;
}

export interface History {
  window: '1h' | '24h';
  bucket_secs: number;
  release: string | null;
  from: string;
  to: string;
  buckets: Bucket[];
  totals: Figures;
}

export interface ReleaseFigures {
  release: string;
  calls: number;
  share: number;
  errors: Errors;
  error_rate: number;
  memory: MemoryCounts;
  injected_records: number;
  injected_tokens: number;
  injected_tokens_per_call: number;
  visible_tokens: number;
  saved_tokens: number;
  saved_share: number;
  added_latency_ms: { p50: number; p99: number };
}

export type Stage = 'available' | 'canary' | 'shadow' | 'active' | 'retired';

export interface Guard {
  enabled: boolean;
  window_secs: number;
  min_calls: number;
  max_error_rate: number;
  promote_after_secs: number;
}

export interface Rollout {
  stage: Stage;
  canary_percent: number;
  allow: { subjects: string[]; teams: string[]; cidrs: string[] };
  guard: Guard;
  shadow_sample_percent: number;
  note: string | null;
  stage_since_ms: number;
}

export interface Release {
  name: string;
  active: boolean;
  rollout: Rollout;
  schema_versions: string[];
  similarity_threshold: number;
  budget_tokens: number;
  max_items: number;
  placement: string;
}

export interface ShadowTotals {
  sampled: number;
  ids_added: number;
  ids_dropped: number;
  tokens_delta: number;
  recent: { added: string[]; dropped: string[]; tokens_delta: number }[];
}

export interface ReleaseStats {
  name: string;
  scope: string;
  stats: {
    calls: number;
    share: number;
    upstream_errors: number;
    memory_errors: number;
    error_rate: number;
    injected_records: number;
    injected_tokens: number;
    added_latency_ms: { mean: number; p50: number; p99: number };
    window: { secs: number; calls: number; errors: number; error_rate: number };
    shadow: ShadowTotals;
  };
}

export interface DataHealth {
  computed_at: string;
  records: { total: number; active: number; paused: number; archived: number; proposed?: number; dormant?: number };
  live: number;
  non_empty_content: { count: number; share: number };
  future_valid_until: { count: number; share: number };
  not_yet_valid: { count: number };
  schema_failures: { count: number; items: { id: string; type: string; schema_version: string; problems: Problem[] }[] };
  never_injected: { count: number; share: number; sample: string[] };
  by_type: { type: string; live: number; never_injected: number; schema_failures: number }[];
}

export interface RecentRequest {
  request_id: string;
  at: string;
  release: string;
  caller: { kind: string; key_id?: string; name?: string; subject?: string | null; scopes: string[] };
  model: string;
  stream: boolean;
  memory_status: string;
  injected: number;
  tokens: number;
  status: number;
  query_preview: string;
  explainable: boolean;
}

export interface LayerTrace {
  layer: string;
  input: number;
  output: number;
  removed_count: number;
  removed?: { id: string; reason: string; score?: number }[];
  kept?: { id: string; score?: number | null; exact?: boolean; tokens?: number }[];
}

export interface RecordSummary {
  type: string;
  key?: string;
  priority: number;
  scope: string[];
  tokens: number;
  status: string;
}

export interface MatchedQuery {
  text: string;
  from: string[];
  follow_up?: boolean;
  left_out?: { harness_blocks: number; other_blocks: number; tool_results: number };
}

export interface Explanation {
  release: string;
  request_id: string | null;
  caller: { subject: string | null; scopes: string[] };
  /** What the funnel matched: memgate answers the text with where it came from. */
  query: MatchedQuery | null;
  status: string;
  degraded_reason: string | null;
  injected: string[];
  stubs: string[];
  tokens: number;
  placed_in: string | null;
  block: string | null;
  trace: { layers: LayerTrace[]; notes?: string[] } | null;
  records?: Record<string, RecordSummary>;
  request: Record<string, unknown>;
}

export interface GatewayKey {
  id: string;
  tenant: string;
  name: string;
  prefix: string;
  scopes: string[];
  permissions: string[];
  rate_limit_per_minute: number | null;
  created_at: string;
  revoked_at: string | null;
}

export interface ImportReport {
  dry_run: boolean;
  import_id: string | null;
  applied: boolean;
  counts: { new: number; existing: number; invalid: number };
  lines: { line: number; status: 'new' | 'existing' | 'invalid'; id?: string; problems?: Problem[] }[];
}

export interface SchemaList {
  data: { schema_version: string; types: string[] }[];
}

export type JsonSchema = {
  title?: string;
  description?: string;
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean | JsonSchema;
  items?: JsonSchema;
  enum?: unknown[];
  format?: string;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  pattern?: string;
};
