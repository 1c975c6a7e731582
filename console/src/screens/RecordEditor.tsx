// Create or edit a record: the envelope's fields, and the content as a form generated from the
// type's JSON Schema (or as JSON). memgate's 422 problems are listed above the form, each linked
// to its field, and shown at the field their JSON path names. An edit is sent as a JSON merge
// patch of what changed, with If-Match: <revision>, so a concurrent change is refused, not lost.

import { useRef, useState } from 'preact/hooks';
import { ApiError, call, get, type Problem } from '../api';
import { go, href } from '../router';
import type { JsonSchema, MemoryRecord, SchemaList } from '../types';
import { ErrorNote, Loading, asApiError, splitList, useApp, useLoad } from '../ui/core';
import { Field, fieldId, fieldPaths, prune } from '../ui/SchemaForm';
import { useSchemas } from './Records';

const OPEN_END = '9999-12-31T23:59:59Z';

export function RecordEditor({ id }: { id?: string }) {
  const schemas = useSchemas();
  const existing = useLoad(() => (id ? get<MemoryRecord>(`/memories/${encodeURIComponent(id)}`) : Promise.resolve(undefined)), [id]);
  const title = id ? `Edit ${id}` : 'New record';
  return (
    <section aria-labelledby="editor-title">
      <p class="crumbs">
        <a href={id ? href('records', id) : href('records')}>← {id ? id : 'Records'}</a>
      </p>
      <div class="screen-head">
        <h1 id="editor-title" tabIndex={-1}>
          {title}
        </h1>
      </div>
      <ErrorNote error={existing.error ?? schemas.error} />
      {(id && !existing.data) || !schemas.data ? <Loading what="the form" /> : <EditorForm key={existing.data?.revision ?? 'new'} original={existing.data} schemas={schemas.data} />}
    </section>
  );
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => !!v && typeof v === 'object' && !Array.isArray(v);

/** The RFC 7396 merge patch that turns `a` into `b`. */
export function mergeDiff(a: Obj, b: Obj): Obj {
  const out: Obj = {};
  for (const k of Object.keys(a)) if (!(k in b)) out[k] = null;
  for (const [k, v] of Object.entries(b)) {
    if (isObj(a[k]) && isObj(v)) {
      const d = mergeDiff(a[k] as Obj, v);
      if (Object.keys(d).length) out[k] = d;
    } else if (JSON.stringify(a[k]) !== JSON.stringify(v)) out[k] = v;
  }
  return out;
}

function envelopeOf(r: MemoryRecord): Obj {
  const { last_updated: _drop, ...metadata } = r.metadata;
  const out: Obj = { type: r.type, schema_version: r.schema_version, scope: r.scope, valid_from: r.valid_from, valid_until: r.valid_until, priority: r.priority, aliases: r.aliases, content: r.content, metadata };
  if (r.key) out.key = r.key;
  return out;
}

/** Focuses the field a problem names, or the nearest enclosing one. */
function focusPath(path: string) {
  let p = path;
  while (p) {
    const el = document.getElementById(fieldId(p));
    if (el) {
      el.focus();
      el.scrollIntoView({ block: 'center' });
      return;
    }
    p = p.replace(/(\.[^.[\]]+|\[[^\]]*\])$/, '');
    if (p === '$') break;
  }
}

function EditorForm({ original, schemas }: { original?: MemoryRecord; schemas: SchemaList }) {
  const app = useApp();
  const versions = schemas.data.map((v) => v.schema_version);
  const [version, setVersion] = useState(original?.schema_version ?? versions[0] ?? 'v1');
  const typesOf = (v: string) => schemas.data.find((x) => x.schema_version === v)?.types ?? [];
  const [type, setType] = useState(original?.type ?? typesOf(version)[0] ?? '');
  const [recordId, setRecordId] = useState('');
  const [scope, setScope] = useState(original?.scope.join(', ') ?? '');
  const [priority, setPriority] = useState(String(original?.priority ?? 3));
  const [validFrom, setValidFrom] = useState(original?.valid_from ?? '');
  const [validUntil, setValidUntil] = useState(original && original.valid_until !== OPEN_END ? original.valid_until : '');
  const [key, setKey] = useState(original?.key ?? '');
  const [aliases, setAliases] = useState(original?.aliases.join('\n') ?? '');
  const [metadata, setMetadata] = useState(JSON.stringify(original ? envelopeOf(original).metadata : { source: 'console' }, null, 2));
  const [content, setContent] = useState<unknown>(original?.content ?? {});
  const [jsonMode, setJsonMode] = useState(false);
  const [contentText, setContentText] = useState('');
  const [problems, setProblems] = useState<Problem[]>([]);
  const [error, setError] = useState<ApiError | undefined>();
  const [busy, setBusy] = useState(false);
  const summary = useRef<HTMLDivElement>(null);
  const schema = useLoad(() => get<JsonSchema>(`/schemas/${encodeURIComponent(version)}/${encodeURIComponent(type)}`), [version, type]);

  const byPath = new Map<string, Problem[]>();
  for (const p of problems) byPath.set(p.path, [...(byPath.get(p.path) ?? []), p]);
  const placed = schema.data && !jsonMode ? fieldPaths(schema.data, content, '$.content') : new Set<string>();
  const stray = problems.filter((p) => p.path.startsWith('$.content') && (p.path === '$.content' || !placed.has(p.path)));
  const under = (prefix: string) => problems.filter((p) => p.path === prefix || p.path.startsWith(`${prefix}[`) || p.path.startsWith(`${prefix}.`));
  const envelopeProblems = (path: string) => {
    const list = under(path);
    return list.length ? (
      <ul class="field-problems" id={`${fieldId(path)}-problems`}>
        {list.map((p) => (
          <li key={p.path + p.message}>
            {p.path !== path ? <code>{p.path}</code> : null} {p.message}
          </li>
        ))}
      </ul>
    ) : null;
  };
  const inv = (path: string) => (under(path).length ? { 'aria-invalid': 'true' as const, 'aria-describedby': `${fieldId(path)}-problems` } : {});

  const toggleJson = () => {
    if (!jsonMode) setContentText(JSON.stringify(prune(content) ?? {}, null, 2));
    else {
      try {
        setContent(JSON.parse(contentText || '{}'));
      } catch {
        setProblems([{ path: '$.content', kind: 'invalid_json', message: 'the content is not valid JSON' }]);
        return;
      }
    }
    setJsonMode(!jsonMode);
  };

  const fail = (list: Problem[]) => {
    setProblems(list);
    requestAnimationFrame(() => summary.current?.focus());
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    const local: Problem[] = [];
    let meta: unknown = {};
    try {
      meta = metadata.trim() ? JSON.parse(metadata) : {};
    } catch {
      local.push({ path: '$.metadata', kind: 'invalid_json', message: 'metadata is not valid JSON' });
    }
    let body: unknown = prune(content) ?? {};
    if (jsonMode) {
      try {
        body = JSON.parse(contentText || '{}');
      } catch {
        local.push({ path: '$.content', kind: 'invalid_json', message: 'the content is not valid JSON' });
      }
    }
    if (local.length) return fail(local);
    const envelope: Obj = { type, schema_version: version, scope: splitList(scope), priority: Number(priority), aliases: aliases.split('\n').map((a) => a.trim()).filter(Boolean), content: body, metadata: meta };
    if (validFrom.trim()) envelope.valid_from = validFrom.trim();
    if (validUntil.trim()) envelope.valid_until = validUntil.trim();
    else if (original) envelope.valid_until = OPEN_END;
    if (key.trim()) envelope.key = key.trim();
    setBusy(true);
    try {
      if (original) {
        const patch = mergeDiff(envelopeOf(original), envelope);
        if (!Object.keys(patch).length) {
          app.toast('Nothing changed.');
          go(href('records', original.id));
          return;
        }
        await call('PATCH', `/memories/${encodeURIComponent(original.id)}`, { body: patch, headers: { 'If-Match': String(original.revision) } });
        app.toast(`${original.id} saved as revision ${original.revision + 1}.`);
        go(href('records', original.id));
      } else {
        if (recordId.trim()) envelope.id = recordId.trim();
        const answer = await call<{ id: string; revision: number; deduplicated?: boolean; superseded?: boolean; exact_repeat?: boolean; similarity?: number }>('POST', '/memories', { body: envelope });
        const how = answer.deduplicated
          ? `It nearly repeated ${answer.id} (similarity ${answer.similarity?.toFixed(2)}), so that record was updated instead of adding a twin.`
          : answer.superseded
            ? `It superseded the live record with the same key and scope (${answer.id}, revision ${answer.revision}).`
            : answer.exact_repeat
              ? `An identical record exists already: ${answer.id}.`
              : `Created ${answer.id}.`;
        app.toast(how);
        go(href('records', answer.id));
      }
    } catch (err) {
      const api = asApiError(err);
      if (api.problems?.length) fail(api.problems);
      else {
        setProblems([]);
        setError(api);
      }
    } finally {
      setBusy(false);
    }
  };

  const disabled = !app.canWrite || busy;
  return (
    <form class="editor" onSubmit={submit} noValidate>
      {problems.length ? (
        <div class="note error problems-summary" role="alert" tabIndex={-1} ref={summary} aria-labelledby="problems-title">
          <h2 id="problems-title" class="h4">
            memgate refused the record: {problems.length} problem{problems.length === 1 ? '' : 's'}
          </h2>
          <ul>
            {problems.map((p) => (
              <li key={p.path + p.message}>
                <a
                  href={`#${fieldId(p.path)}`}
                  onClick={(e) => {
                    e.preventDefault();
                    focusPath(p.path);
                  }}
                >
                  <code>{p.path}</code>
                </a>{' '}
                {p.message} <span class="muted">({p.kind})</span>
                {p.path.startsWith('$.content') && !jsonMode && !placed.has(p.path) ? <span class="muted"> — no field for this path in the form</span> : null}
              </li>
            ))}
          </ul>
        </div>
      ) : null}
      <ErrorNote error={error} />
      <div class="two-col">
        <fieldset class="card group">
          <legend>Envelope</legend>
          <div class="row">
            <div class="field">
              <label for={fieldId('$.schema_version')}>Schema version</label>
              <select id={fieldId('$.schema_version')} value={version} disabled={disabled} {...inv('$.schema_version')} onChange={(e) => {
                const v = e.currentTarget.value;
                setVersion(v);
                if (!typesOf(v).includes(type)) setType(typesOf(v)[0] ?? '');
              }}>
                {versions.map((v) => (
                  <option key={v}>{v}</option>
                ))}
              </select>
              {envelopeProblems('$.schema_version')}
            </div>
            <div class="field">
              <label for={fieldId('$.type')}>Type</label>
              <select id={fieldId('$.type')} value={type} disabled={disabled} {...inv('$.type')} onChange={(e) => setType(e.currentTarget.value)}>
                {typesOf(version).map((t) => (
                  <option key={t}>{t}</option>
                ))}
              </select>
              {envelopeProblems('$.type')}
            </div>
            <div class="field narrow">
              <label for={fieldId('$.priority')}>Priority</label>
              <select id={fieldId('$.priority')} value={priority} disabled={disabled} {...inv('$.priority')} onChange={(e) => setPriority(e.currentTarget.value)}>
                {['1 – lowest', '2', '3 – default', '4 – high', '5 – highest'].map((label, i) => (
                  <option key={label} value={String(i + 1)}>
                    {label}
                  </option>
                ))}
              </select>
              <div class="hint">4–5: a stub when over budget</div>
              {envelopeProblems('$.priority')}
            </div>
          </div>
          {!original ? (
            <div class="field">
              <label for={fieldId('$.id')}>Id (optional)</label>
              <input id={fieldId('$.id')} value={recordId} disabled={disabled} placeholder="generated when empty" {...inv('$.id')} onInput={(e) => setRecordId(e.currentTarget.value)} />
              {envelopeProblems('$.id')}
            </div>
          ) : null}
          <div class="field">
            <label for={fieldId('$.scope')}>
              Scope<span class="req" aria-label="required"> *</span>
            </label>
            <input id={fieldId('$.scope')} value={scope} disabled={disabled} placeholder="user:u-789, team:sales — or public" {...inv('$.scope')} onInput={(e) => setScope(e.currentTarget.value)} />
            <div class="hint">Who may see it, comma-separated: public, user:…, team:…, role:…, agent:…</div>
            {envelopeProblems('$.scope')}
          </div>
          <div class="field">
            <label for={fieldId('$.key')}>Key (topic)</label>
            <input id={fieldId('$.key')} value={key} disabled={disabled} placeholder="customer:u-789:profile" {...inv('$.key')} onInput={(e) => setKey(e.currentTarget.value)} />
            <div class="hint">A record with the same key and scope supersedes the live one.</div>
            {envelopeProblems('$.key')}
          </div>
          <div class="row">
            <div class="field">
              <label for={fieldId('$.valid_from')}>Valid from (UTC)</label>
              <input id={fieldId('$.valid_from')} value={validFrom} disabled={disabled} placeholder="now" {...inv('$.valid_from')} onInput={(e) => setValidFrom(e.currentTarget.value)} />
              {envelopeProblems('$.valid_from')}
            </div>
            <div class="field">
              <label for={fieldId('$.valid_until')}>Valid until (UTC)</label>
              <input id={fieldId('$.valid_until')} value={validUntil} disabled={disabled} placeholder="open" {...inv('$.valid_until')} onInput={(e) => setValidUntil(e.currentTarget.value)} />
              {envelopeProblems('$.valid_until')}
            </div>
          </div>
          <div class="hint">Times as RFC 3339, e.g. 2025-06-15T09:00:00Z.</div>
          <div class="field">
            <label for={fieldId('$.aliases')}>Aliases (one per line)</label>
            <textarea id={fieldId('$.aliases')} rows={3} value={aliases} disabled={disabled} {...inv('$.aliases')} onInput={(e) => setAliases(e.currentTarget.value)} />
            <div class="hint">Other phrasings that should find this record (any language).</div>
            {envelopeProblems('$.aliases')}
          </div>
          <div class="field">
            <label for={fieldId('$.metadata')}>Metadata (JSON)</label>
            <textarea id={fieldId('$.metadata')} class="mono" rows={3} value={metadata} disabled={disabled} {...inv('$.metadata')} onInput={(e) => setMetadata(e.currentTarget.value)} />
            {envelopeProblems('$.metadata')}
          </div>
        </fieldset>
        <fieldset class="card group content-form">
          <legend>
            Content <span class="muted">({schema.data?.title ?? `${type} ${version}`})</span>
          </legend>
          <button type="button" class="button small" onClick={toggleJson} aria-pressed={jsonMode}>
            {jsonMode ? 'Edit as a form' : 'Edit as JSON'}
          </button>
          <ErrorNote error={schema.error} />
          {schema.data?.description ? <p class="hint">{schema.data.description}</p> : null}
          {jsonMode ? (
            <div class="field">
              <label for={fieldId('$.content')}>Content (JSON)</label>
              <textarea id={fieldId('$.content')} class="mono" rows={18} value={contentText} disabled={disabled} {...inv('$.content')} onInput={(e) => setContentText(e.currentTarget.value)} />
              {envelopeProblems('$.content')}
            </div>
          ) : schema.data ? (
            <>
              {stray.length ? (
                <ul class="field-problems" id={`${fieldId('$.content')}-problems`}>
                  {stray.map((p) => (
                    <li key={p.path + p.message}>
                      <code>{p.path}</code> {p.message}
                    </li>
                  ))}
                </ul>
              ) : null}
              {Object.entries(schema.data.properties ?? {}).map(([k, s]) => (
                <Field
                  key={`${version}/${type}/${k}`}
                  schema={s}
                  value={(content as Obj)?.[k]}
                  name={k}
                  path={`$.content.${k}`}
                  required={schema.data?.required?.includes(k)}
                  problems={byPath}
                  disabled={disabled}
                  onChange={(v) => setContent({ ...((content as Obj) ?? {}), [k]: v })}
                />
              ))}
            </>
          ) : (
            <Loading what="the schema" />
          )}
        </fieldset>
      </div>
      <div class="actions sticky-actions">
        <button type="submit" class="button primary" disabled={disabled}>
          {busy ? 'Saving…' : original ? `Save revision ${original.revision + 1}` : 'Create record'}
        </button>
        <a class="button" href={original ? href('records', original.id) : href('records')}>
          Cancel
        </a>
      </div>
    </form>
  );
}
