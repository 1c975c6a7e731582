// Review: the records awaiting an operator (status `proposed`: agents' writes under
// `agent_writes = "proposed"`, the observer's under `observe = "propose"`), with their words, type,
// scope, author and evidence. Approve, edit then approve (one write, every check), reject, or
// select several and decide for all; filter by subject, type and author.

import { useState } from 'preact/hooks';
import { ApiError, get, post } from '../api';
import { ago, time, words } from '../format';
import { href, type Route } from '../router';
import type { MemoryRecord, ReviewResult } from '../types';
import { Badge, ErrorNote, Loading, ReadOnlyNote, asApiError, useAction, useApp, useLoad } from '../ui/core';
import { useSchemas } from './Records';

type Filters = { subject: string; type: string; author: string };
const PAGE = 50;

/** `u-789` and `user:u-789` both mean the person's scope; any other `kind:value` is kept as is. */
function scopeOf(subject: string): string {
  const s = subject.trim();
  if (!s) return '';
  return /^(public|[a-z_-]+:.+)$/.test(s) ? s : `user:${s}`;
}

/** What the observer keeps about a record it extracted (`metadata.observer`: request id, release,
 * model, evidence, confidence, exchange id, and the record it would replace), if anything. */
function observerOf(r: MemoryRecord): Record<string, unknown> {
  const o = r.metadata?.observer;
  return o && typeof o === 'object' && !Array.isArray(o) ? (o as Record<string, unknown>) : {};
}

/** The person's words an extracted record rests on: the observer's `metadata.observer.evidence`,
 * else `provenance.evidence` or `metadata.evidence`. */
function evidenceOf(r: MemoryRecord): string | null {
  const e = observerOf(r).evidence ?? r.provenance?.evidence ?? r.metadata?.evidence;
  return typeof e === 'string' && e ? e : null;
}

/** The rest of its provenance, as `name: value` pairs (writer, request id, release, model,
 * confidence): memgate's `provenance`, then what the observer kept beside it. */
function provenanceOf(r: MemoryRecord): [string, string][] {
  const given = r.provenance ?? r.metadata?.provenance;
  const p = { ...observerOf(r), ...(given && typeof given === 'object' ? (given as Record<string, unknown>) : {}) };
  return Object.entries(p)
    .filter(([k, v]) => k !== 'evidence' && v !== null && v !== undefined && typeof v !== 'object')
    .map(([k, v]) => [k, String(v)]);
}

/** The live record a proposal would replace once approved (`metadata.observer.supersedes`). */
function supersedesOf(r: MemoryRecord): { id: string; key: string | null } | null {
  const s = observerOf(r).supersedes as { id?: unknown; key?: unknown } | undefined;
  if (!s || typeof s !== 'object' || typeof s.id !== 'string' || !s.id) return null;
  return { id: s.id, key: typeof s.key === 'string' ? s.key : null };
}

export function Review({ route }: { route: Route }) {
  const app = useApp();
  const { run, busy } = useAction();
  const schemas = useSchemas();
  const initial: Filters = { subject: route.params.get('subject') ?? '', type: route.params.get('type') ?? '', author: route.params.get('author') ?? '' };
  const [form, setForm] = useState<Filters>(initial);
  const [applied, setApplied] = useState<Filters>(initial);
  const [rows, setRows] = useState<{ data: MemoryRecord[]; next: string | null }>({ data: [], next: null });
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [editing, setEditing] = useState<string | null>(null);
  const query = () => ({ status: 'proposed', scope: scopeOf(applied.subject), type: applied.type, author: applied.author, limit: PAGE });
  const list = useLoad(async () => {
    const page = await get<{ data: MemoryRecord[]; next_cursor: string | null }>('/memories', query());
    setRows({ data: page.data, next: page.next_cursor });
    setSelected(new Set());
    return page;
  }, [JSON.stringify(applied)]);
  const types = [...new Set((schemas.data?.data ?? []).flatMap((v) => v.types))].sort();

  const drop = (ids: string[]) => {
    setRows((r) => ({ ...r, data: r.data.filter((x) => !ids.includes(x.id)) }));
    setSelected((s) => new Set([...s].filter((id) => !ids.includes(id))));
  };
  const more = async () => {
    if (!rows.next) return;
    try {
      const page = await get<{ data: MemoryRecord[]; next_cursor: string | null }>('/memories', { ...query(), cursor: rows.next });
      setRows((r) => ({ data: [...r.data, ...page.data], next: page.next_cursor }));
    } catch (error) {
      app.toast(asApiError(error).message, { error: true });
    }
  };
  const approve = (r: MemoryRecord) =>
    run(async () => {
      await post(`/memories/${encodeURIComponent(r.id)}/activate`);
      drop([r.id]);
    }, `Approved ${r.id}: it is active and may be injected.`);
  const reject = async (r: MemoryRecord) => {
    const { ok } = await app.confirm({
      title: `Reject ${r.id}?`,
      message: <p>The proposed record is deleted; its history keeps what was proposed and that you rejected it.</p>,
      confirmLabel: 'Reject',
      danger: true,
    });
    if (!ok) return;
    await run(async () => {
      const result = await post<{ data: ReviewResult[] }>('/memories/reject', { ids: [r.id] });
      const failed = result.data.find((x) => !x.ok);
      if (failed) throw new ApiError(409, 'invalid_request_error', failed.error?.message ?? 'refused');
      drop([r.id]);
    }, `Rejected ${r.id}.`);
  };
  const bulk = async (decision: 'activate' | 'reject') => {
    const ids = [...selected];
    if (!ids.length) return;
    if (decision === 'reject') {
      const { ok } = await app.confirm({
        title: `Reject ${ids.length} proposed record${ids.length === 1 ? '' : 's'}?`,
        message: <p>Each is deleted; the history keeps what was proposed.</p>,
        confirmLabel: 'Reject all',
        danger: true,
      });
      if (!ok) return;
    }
    await run(async () => {
      const done: string[] = [];
      const failures: string[] = [];
      // The API takes at most 100 ids a call.
      for (let i = 0; i < ids.length; i += 100) {
        const result = await post<{ data: ReviewResult[] }>(`/memories/${decision}`, { ids: ids.slice(i, i + 100) });
        for (const x of result.data) (x.ok ? done : failures).push(x.ok ? x.id : `${x.id}: ${x.error?.message ?? 'refused'}`);
      }
      drop(done);
      const verb = decision === 'activate' ? 'Approved' : 'Rejected';
      if (failures.length) throw new ApiError(409, 'invalid_request_error', `${verb} ${done.length}; ${failures.length} refused: ${failures.join('; ')}`);
      app.toast(`${verb} ${done.length} record${done.length === 1 ? '' : 's'}.`);
    });
  };

  const submit = (e: Event) => {
    e.preventDefault();
    setApplied({ ...form });
    const q = new URLSearchParams(Object.entries(form).filter(([, v]) => v)).toString();
    history.replaceState(null, '', `${href('review')}${q ? `?${q}` : ''}`);
  };
  const set = (k: keyof Filters) => (e: Event) => setForm({ ...form, [k]: (e.currentTarget as HTMLInputElement).value });
  const all = rows.data.length > 0 && rows.data.every((r) => selected.has(r.id));
  const toggle = (id: string) =>
    setSelected((s) => {
      const next = new Set(s);
      if (next.has(id)) next.delete(id);
      else next.add(id);
      return next;
    });

  return (
    <section aria-labelledby="review-title">
      <div class="screen-head">
        <h1 id="review-title" tabIndex={-1}>
          Review
        </h1>
        <div class="actions" role="group" aria-label="Decide for the selected records">
          <button type="button" class="button primary" disabled={!app.canWrite || busy || !selected.size} onClick={() => bulk('activate')}>
            Approve selected ({selected.size})
          </button>
          <button type="button" class="button danger" disabled={!app.canWrite || busy || !selected.size} onClick={() => bulk('reject')}>
            Reject selected
          </button>
        </div>
      </div>
      <p class="muted small">Records awaiting review are never injected. Approving makes one active; rejecting deletes it (its history stays).</p>
      <ReadOnlyNote />
      <form class="filters card" onSubmit={submit} role="search" aria-label="Filter the review queue">
        <div class="field">
          <label for="rv-subject">Subject or scope</label>
          <input id="rv-subject" value={form.subject} onInput={set('subject')} placeholder="u-789 or team:support" />
        </div>
        <div class="field">
          <label for="rv-type">Type</label>
          <select id="rv-type" value={form.type} onChange={set('type')}>
            <option value="">any</option>
            {types.map((t) => (
              <option key={t}>{t}</option>
            ))}
          </select>
        </div>
        <div class="field">
          <label for="rv-author">Author</label>
          <input id="rv-author" value={form.author} onInput={set('author')} placeholder="observer or agent:key-…" />
        </div>
        <div class="field end">
          <button type="submit" class="button primary">
            Filter
          </button>
        </div>
      </form>
      <ErrorNote error={list.error} />
      {list.loading && !rows.data.length ? <Loading what="the review queue" /> : null}
      <div class="table-scroll">
        <table class="data records review" aria-describedby="review-count">
          <caption id="review-count" class="caption">
            {rows.data.length} record{rows.data.length === 1 ? '' : 's'} awaiting review{rows.next ? ' shown; more below' : ''}
          </caption>
          <thead>
            <tr>
              <th scope="col">
                <input type="checkbox" aria-label="Select every record shown" checked={all} disabled={!rows.data.length} onChange={() => setSelected(all ? new Set() : new Set(rows.data.map((r) => r.id)))} />
              </th>
              <th scope="col">Record</th>
              <th scope="col">Type</th>
              <th scope="col">Scope</th>
              <th scope="col">Author</th>
              <th scope="col">Proposed</th>
              <th scope="col">Decide</th>
            </tr>
          </thead>
          <tbody>
            {rows.data.map((r) => (
              <tr key={r.id} data-review={r.id} class="review-item">
                <td>
                  <input type="checkbox" aria-label={`Select ${r.id}`} checked={selected.has(r.id)} onChange={() => toggle(r.id)} />
                </td>
                <td>
                  <div data-words>{words(r.content).join(' · ') || <span class="muted">(no words)</span>}</div>
                  <a class="small" href={href('records', r.id)}>
                    {r.id}
                  </a>
                  {r.key ? <span class="muted small"> · {r.key}</span> : null}
                  {evidenceOf(r) ? (
                    <blockquote class="evidence small" data-evidence>
                      <span class="muted">Evidence: </span>“{evidenceOf(r)}”
                    </blockquote>
                  ) : null}
                  {supersedesOf(r) ? (
                    <div class="small" data-supersedes>
                      Approving replaces <a href={href('records', supersedesOf(r)!.id)}>{supersedesOf(r)!.id}</a>
                      {supersedesOf(r)!.key ? <span class="muted"> (key {supersedesOf(r)!.key})</span> : null}, which stays as it is until then.
                    </div>
                  ) : null}
                  {provenanceOf(r).length ? (
                    <div class="muted small" data-provenance>
                      {provenanceOf(r)
                        .map(([k, v]) => `${k} ${v}`)
                        .join(' · ')}
                    </div>
                  ) : null}
                  {editing === r.id ? <Edit record={r} onDone={() => (setEditing(null), drop([r.id]))} onCancel={() => setEditing(null)} /> : null}
                </td>
                <td>{r.type}</td>
                <td>{r.scope.join(', ')}</td>
                <td>{r.author ?? <span class="muted">–</span>}</td>
                <td title={time(r.updated_at)}>{ago(r.updated_at)}</td>
                <td>
                  <div class="actions">
                    <button type="button" class="button primary small" disabled={!app.canWrite || busy} onClick={() => approve(r)}>
                      Approve
                    </button>
                    <button type="button" class="button small" disabled={!app.canWrite || busy} onClick={() => setEditing(editing === r.id ? null : r.id)} aria-expanded={editing === r.id}>
                      Edit…
                    </button>
                    <button type="button" class="button danger small" disabled={!app.canWrite || busy} onClick={() => reject(r)}>
                      Reject
                    </button>
                  </div>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {rows.next ? (
        <button type="button" class="button" onClick={more}>
          Load more
        </button>
      ) : null}
      {!list.loading && !rows.data.length && !list.error ? (
        <p class="muted">
          <Badge tone="good">empty</Badge> Nothing awaits review{applied.subject || applied.type || applied.author ? ' with these filters' : ''}.
        </p>
      ) : null}
    </section>
  );
}

/** The record's content as JSON to change, approved with the change in one write. */
function Edit({ record, onDone, onCancel }: { record: MemoryRecord; onDone: () => void; onCancel: () => void }) {
  const { run, busy } = useAction();
  const [text, setText] = useState(JSON.stringify(record.content, null, 2));
  const [problem, setProblem] = useState<ApiError | undefined>();
  const id = `edit-${record.id}`;
  const save = async (e: Event) => {
    e.preventDefault();
    let content: unknown;
    try {
      content = JSON.parse(text);
    } catch (err) {
      setProblem(new ApiError(0, 'client_error', `The content is not valid JSON: ${(err as Error).message}`));
      return;
    }
    setProblem(undefined);
    await run(async () => {
      try {
        await post(`/memories/${encodeURIComponent(record.id)}/activate`, { content });
      } catch (err) {
        const api = asApiError(err);
        if (api.problems) setProblem(api);
        throw err;
      }
      onDone();
    }, `Approved ${record.id} with your changes.`);
  };
  return (
    <form class="card small" onSubmit={save} aria-label={`Edit ${record.id} then approve`}>
      <label for={id}>Content (JSON)</label>
      <textarea id={id} value={text} onInput={(e) => setText((e.currentTarget as HTMLTextAreaElement).value)} aria-invalid={problem ? 'true' : undefined} aria-describedby={problem ? `${id}-problem` : undefined} />
      {problem ? (
        <div id={`${id}-problem`} class="note error" role="alert">
          {problem.message}
          {problem.problems ? (
            <ul>
              {problem.problems.map((p) => (
                <li key={p.path}>
                  <code>{p.path}</code> {p.message}
                </li>
              ))}
            </ul>
          ) : null}
        </div>
      ) : null}
      <div class="actions">
        <button type="submit" class="button primary small" disabled={busy}>
          Approve with changes
        </button>
        <button type="button" class="button small" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}
