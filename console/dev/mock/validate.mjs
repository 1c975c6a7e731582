// The mock's record checks: the envelope rules of src/memory/envelope.rs, a JSON Schema subset
// that covers every keyword the built-in schemas use, and a small secret scan. Problems have the
// real shape ({path, kind, message}), paths like `$.content.steps[1].owner`, sorted by path.

const FIELDS = ['id', 'type', 'schema_version', 'scope', 'valid_from', 'valid_until', 'priority',
  'key', 'aliases', 'content', 'metadata', 'status', 'tenant'];
const SERVER_FIELDS = ['revision', 'created_at', 'updated_at', 'last_accessed_at', 'access_count', 'tenant'];
export const OPEN_END = '9999-12-31T23:59:59Z';

const child = (path, key) => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`);

export function isValidScope(scope) {
  return scope === 'public' || /^(user|team|role|agent|org|tenant|group):[^\s:][^\s]{0,127}$/.test(scope);
}

function typeOf(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (Number.isInteger(value)) return 'integer';
  return typeof value;
}

function matchesType(value, type) {
  const actual = typeOf(value);
  if (type === 'number') return actual === 'number' || actual === 'integer';
  return actual === type;
}

const FORMATS = {
  date: (s) => /^\d{4}-\d{2}-\d{2}$/.test(s) && !Number.isNaN(Date.parse(`${s}T00:00:00Z`)),
  'date-time': (s) => /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(s) && !Number.isNaN(Date.parse(s)),
  email: (s) => /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(s),
};

/** Validates `value` against `schema`, pushing problems; `title` names the schema in messages. */
export function validateSchema(value, schema, path, title, problems) {
  const push = (p, message) => problems.push({ path: p, kind: 'schema_violation', message });
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    push(path, `value is not one of ${schema.enum.map((e) => JSON.stringify(e)).join(', ')}`);
    return;
  }
  if (schema.type) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => matchesType(value, t))) {
      push(path, `value is not of type ${types.map((t) => `"${t}"`).join(' or ')}`);
      return;
    }
  }
  if (typeof value === 'string') {
    const length = [...value].length;
    if (schema.minLength !== undefined && length < schema.minLength) {
      push(path, schema.minLength === 1 ? 'value is empty' : `value is shorter than ${schema.minLength} characters`);
    }
    if (schema.maxLength !== undefined && length > schema.maxLength) push(path, `value is longer than ${schema.maxLength} characters`);
    if (schema.pattern && !new RegExp(schema.pattern, 'u').test(value)) push(path, `value does not match the pattern ${schema.pattern}`);
    if (schema.format && FORMATS[schema.format] && !FORMATS[schema.format](value)) push(path, `value is not a "${schema.format}"`);
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) push(path, `value is less than the minimum of ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) push(path, `value is greater than the maximum of ${schema.maximum}`);
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) push(path, `fewer than ${schema.minItems} items`);
    if (schema.maxItems !== undefined && value.length > schema.maxItems) push(path, `more than ${schema.maxItems} items`);
    if (schema.uniqueItems && new Set(value.map((v) => JSON.stringify(v))).size !== value.length) push(path, 'items are not unique');
    if (schema.items) value.forEach((item, i) => validateSchema(item, schema.items, `${path}[${i}]`, title, problems));
  }
  if (typeOf(value) === 'object') {
    const keys = Object.keys(value);
    for (const name of schema.required ?? []) {
      if (!(name in value)) push(child(path, name), `required field \`${name}\` is missing`);
    }
    if (schema.minProperties !== undefined && keys.length < schema.minProperties) push(path, `fewer than ${schema.minProperties} fields`);
    if (schema.maxProperties !== undefined && keys.length > schema.maxProperties) push(path, `more than ${schema.maxProperties} fields`);
    for (const key of keys) {
      const p = child(path, key);
      if (schema.propertyNames?.maxLength !== undefined && key.length > schema.propertyNames.maxLength) {
        push(p, `field name is longer than ${schema.propertyNames.maxLength} characters`);
      }
      if (schema.properties && key in schema.properties) {
        validateSchema(value[key], schema.properties[key], p, title, problems);
      } else if (schema.additionalProperties === false) {
        push(p, `field \`${key}\` is not part of the ${title} schema`);
      } else if (typeof schema.additionalProperties === 'object') {
        validateSchema(value[key], schema.additionalProperties, p, title, problems);
      }
    }
  }
}

const SECRET_KEY = /(password|passwd|pwd|passphrase|secret|api_?key|access_?token|refresh_?token|client_?secret|private_?key)$/i;
const SECRET_SHAPES = [
  [/sk-ant-[A-Za-z0-9_-]{20,}/, 'anthropic_key'],
  [/\b(AKIA|ASIA)[A-Z0-9]{16}\b/, 'aws_access_key'],
  [/\bgh[pousr]_[A-Za-z0-9]{30,}/, 'github_token'],
  [/\bxox[bpas]-[A-Za-z0-9-]{10,}/, 'slack_token'],
  [/-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]+?-----END/, 'private_key'],
  [/\b(password|passwd|pwd|密码|пароль)\s*[:=：]\s*(?!\*+|x{3,}|<|\[|\$|\{\{)\S{4,}/i, 'password'],
  [/[a-z][a-z0-9+.-]*:\/\/[^\s/:@]+:[^\s/@]+@/i, 'connection_string_credential'],
];
const PLACEHOLDER = /^(\*+|x+|<[^>]*>|\[redacted\]|\{\{.*\}\}|\$\{?[A-Z_]+\}?|%[A-Z_]+%|your_[a-z_]+_here|none|n\/a|https?:\/\/.*|\/.*)$/i;

/** Pushes a `secret` problem for every value that looks like one. */
export function scanSecrets(value, path, problems, keyName = '') {
  if (typeof value === 'string') {
    if (keyName && SECRET_KEY.test(keyName.replace(/[-\s]/g, '_')) && value && !PLACEHOLDER.test(value)) {
      problems.push({ path, kind: 'secret', message: `looks like a ${/token/i.test(keyName) ? 'token' : 'password'}; store a reference to where it is kept, never the secret` });
      return;
    }
    for (const [re, what] of SECRET_SHAPES) {
      if (re.test(value)) {
        problems.push({ path, kind: 'secret', message: `looks like a ${what}; store a reference to where it is kept, never the secret` });
        return;
      }
    }
  } else if (Array.isArray(value)) {
    value.forEach((v, i) => scanSecrets(v, `${path}[${i}]`, problems));
  } else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) scanSecrets(v, child(path, k), problems, k);
  }
}

function parseTime(value, path, problems) {
  if (typeof value !== 'string' || Number.isNaN(Date.parse(value)) || !/^\d{4}-\d{2}-\d{2}T/.test(value)) {
    problems.push({ path, kind: 'invalid_time', message: 'must be an RFC 3339 time, e.g. 2025-06-15T09:00:00Z' });
    return null;
  }
  return Date.parse(value);
}

/**
 * Checks one envelope as the server would; returns {problems} or {envelope} (normalized).
 * `schemas` maps version -> type -> schema.
 */
export function checkEnvelope(input, schemas, now = Date.now()) {
  const problems = [];
  if (!input || typeof input !== 'object' || Array.isArray(input)) {
    return { problems: [{ path: '$', kind: 'invalid_type', message: 'a record must be a JSON object' }] };
  }
  for (const name of Object.keys(input)) {
    if (!FIELDS.includes(name) && !SERVER_FIELDS.includes(name)) {
      problems.push({ path: child('$', name), kind: 'unknown_field', message: `\`${name}\` is not a record field; fields are ${FIELDS.slice(0, 12).join(', ')}` });
    }
  }
  const env = {};
  if (input.id !== undefined) {
    if (typeof input.id !== 'string' || !/^[A-Za-z0-9._:-]{1,128}$/.test(input.id)) {
      problems.push({ path: '$.id', kind: 'invalid_id', message: 'id must be 1 to 128 characters of A-Z, a-z, 0-9, ".", "_", ":" or "-"' });
    } else env.id = input.id;
  }
  if (typeof input.type !== 'string' || !input.type) {
    problems.push({ path: '$.type', kind: 'missing_field', message: 'required field `type` is missing' });
  }
  env.type = input.type;
  env.schema_version = input.schema_version ?? 'v1';
  const versions = Object.keys(schemas);
  let schema = null;
  if (!schemas[env.schema_version]) {
    problems.push({ path: '$.schema_version', kind: 'unknown_schema_version', message: `no schema version \`${env.schema_version}\`; known: ${versions.join(', ')}` });
  } else if (typeof env.type === 'string' && env.type) {
    schema = schemas[env.schema_version][env.type];
    if (!schema) {
      problems.push({ path: '$.type', kind: 'unknown_type', message: `schema version ${env.schema_version} has no type \`${env.type}\`; known: ${Object.keys(schemas[env.schema_version]).sort().join(', ')}` });
    }
  }
  if (!Array.isArray(input.scope) || input.scope.length === 0) {
    problems.push({ path: '$.scope', kind: 'invalid_scope', message: 'scope must be a non-empty list like ["user:u-789"] or ["public"]' });
  } else {
    input.scope.forEach((s, i) => {
      if (typeof s !== 'string' || !isValidScope(s)) problems.push({ path: `$.scope[${i}]`, kind: 'invalid_scope', message: 'a scope is `public` or `kind:value` (user:, team:, role:, agent:)' });
    });
    env.scope = [...new Set(input.scope)].sort();
  }
  const from = input.valid_from === undefined ? now : parseTime(input.valid_from, '$.valid_from', problems);
  const until = input.valid_until === undefined ? Date.parse(OPEN_END) : parseTime(input.valid_until, '$.valid_until', problems);
  if (from !== null && until !== null && until <= from) {
    problems.push({ path: '$.valid_until', kind: 'invalid_time_range', message: `valid_until must be after valid_from (got ${new Date(until).toISOString()} and ${new Date(from).toISOString()})` });
  }
  const iso = (ms) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
  env.valid_from = iso(from ?? now);
  env.valid_until = until === Date.parse(OPEN_END) ? OPEN_END : iso(until ?? now);
  env.priority = input.priority ?? 3;
  if (!Number.isInteger(env.priority) || env.priority < 1 || env.priority > 5) {
    problems.push({ path: '$.priority', kind: 'invalid_priority', message: 'priority must be an integer from 1 to 5' });
  }
  if (input.key !== undefined && input.key !== null) {
    if (typeof input.key !== 'string' || !input.key.trim() || input.key.length > 256) {
      problems.push({ path: '$.key', kind: 'invalid_key', message: 'key must be a non-empty string of at most 256 characters' });
    } else env.key = input.key;
  }
  env.aliases = input.aliases ?? [];
  if (!Array.isArray(env.aliases) || env.aliases.some((a) => typeof a !== 'string' || !a.trim() || a.length > 200)) {
    problems.push({ path: '$.aliases', kind: 'invalid_aliases', message: 'aliases must be a list of non-empty strings of at most 200 characters' });
  }
  env.metadata = input.metadata ?? {};
  if (typeof env.metadata !== 'object' || Array.isArray(env.metadata)) {
    problems.push({ path: '$.metadata', kind: 'invalid_type', message: 'metadata must be a JSON object' });
  }
  if (input.status !== undefined && !['active', 'paused', 'archived', 'proposed', 'dormant'].includes(input.status)) {
    problems.push({ path: '$.status', kind: 'invalid_status', message: 'status must be active, paused, archived, proposed or dormant' });
  }
  env.status = input.status;
  if (input.content === undefined) {
    problems.push({ path: '$.content', kind: 'missing_field', message: 'required field `content` is missing' });
  } else if (schema) {
    validateSchema(input.content, schema, '$.content', schema.title ?? `${env.type} ${env.schema_version}`, problems);
  }
  env.content = input.content;
  scanSecrets(input.content, '$.content', problems);
  scanSecrets(env.metadata, '$.metadata', problems);
  if (env.key) scanSecrets(env.key, '$.key', problems);
  if (Array.isArray(env.aliases)) env.aliases.forEach((a, i) => scanSecrets(a, `$.aliases[${i}]`, problems));
  if (problems.length) {
    problems.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    return { problems };
  }
  return { envelope: env };
}

/** RFC 7396 merge patch. */
export function mergePatch(target, patch) {
  if (!patch || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out = target && typeof target === 'object' && !Array.isArray(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}
