// Records: search the tenant's memory (text, type, scope, status, validity, key), open a record,
// create one, import, export, and forget a scope. Sub-screens by address:
//   #/records                 search           #/records/new          create
//   #/records/<id>            one record       #/records/<id>/edit    edit
//   #/records/import          import

import { useState } from 'preact/hooks';
import { call, currentTenant, get, post } from '../api';
import { ago, preview, time, validity } from '../format';
import { go, href, type Route } from '../router';
import type { MemoryRecord, SchemaList } from '../types';
import { Badge, ErrorNote, Loading, ReadOnlyNote, asApiError, useAction, useApp, useLoad } from '../ui/core';
import { RecordDetail } from './RecordDetail';
import { RecordEditor } from './RecordEditor';
import { Import } from './Import';

export function Records({ route }: { route: Route }) {
  const [first, second] = route.parts;
  if (first === 'new') return <RecordEditor />;
  if (first === 'import') return <Import />;
  if (first && second === 'edit') return <RecordEditor id={first} />;
  if (first) return <RecordDetail id={first} />;
  return <Search route={route} />;
}

const FILTERS = ['q', 'type', 'scope', 'status', 'valid', 'key'] as const;
type Filters = Record<(typeof FILTERS)[number], string>;

export function useSchemas() {
  return useLoad(() => get<SchemaList>('/schemas'), []);
}

export function statusTone(status: string): string {
  return status === 'active' ? 'good' : status === 'paused' || status === 'proposed' ? 'warn' : status === 'dormant' ? 'info' : 'muted';
}

function Search({ route }: { route: Route }) {
  const app = useApp();
  const { run, busy } = useAction();
  const schemas = useSchemas();
  const initial = Object.fromEntries(FILTERS.map((f) => [f, route.params.get(f) ?? ''])) as Filters;
  const [form, setForm] = useState<Filters>(initial);
  const [applied, setApplied] = useState<Filters>(initial);
  const [pages, setPages] = useState<{ data: MemoryRecord[]; next: string | null }>({ data: [], next: null });
  const list = useLoad(async () => {
    const page = await get<{ data: MemoryRecord[]; next_cursor: string | null }>('/memories', { ...applied, limit: 50 });
    setPages({ data: page.data, next: page.next_cursor });
    return page;
  }, [JSON.stringify(applied)]);
  const types = [...new Set((schemas.data?.data ?? []).flatMap((v) => v.types))].sort();

  const submit = (e: Event) => {
    e.preventDefault();
    setApplied({ ...form });
    const query = new URLSearchParams(Object.entries(form).filter(([, v]) => v)).toString();
    history.replaceState(null, '', `${href('records')}${query ? `?${query}` : ''}`);
  };
  const more = async () => {
    if (!pages.next) return;
    try {
      const page = await get<{ data: MemoryRecord[]; next_cursor: string | null }>('/memories', { ...applied, limit: 50, cursor: pages.next });
      setPages((p) => ({ data: [...p.data, ...page.data], next: page.next_cursor }));
    } catch (error) {
      app.toast(asApiError(error).message, { error: true });
    }
  };
  const exportNow = async () => {
    await run(async () => {
      const text = await call<string>('GET', '/export', { query: applied, asText: true });
      const blob = new Blob([text], { type: 'application/x-ndjson' });
      const a = document.createElement('a');
      a.href = URL.createObjectURL(blob);
      a.download = `memgate-${currentTenant()}-${new Date().toISOString().slice(0, 10)}.jsonl`;
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(a.href), 10000);
    }, 'Export downloaded.');
  };
  const forget = async () => {
    const scope = (form.scope || '').trim();
    if (!/^(public|[a-z]+:\S+)$/.test(scope)) {
      app.toast('Put the scope to forget (e.g. user:u-789) in the Scope filter first.', { error: true });
      document.getElementById('flt-scope')?.focus();
      return;
    }
    const { ok } = await app.confirm({
      title: `Forget everything about ${scope}?`,
      message: (
        <p>
          Every record in tenant <strong>{app.tenant}</strong> whose scope includes <code>{scope}</code> is erased, <strong>with its history</strong>. This is an erasure for good: it cannot be undone.
        </p>
      ),
      confirmLabel: 'Erase for good',
      danger: true,
      typed: scope,
    });
    if (!ok) return;
    await run(async () => {
      const r = await post<{ records_erased: number; changes_erased: number }>('/memories/forget', { scope });
      app.toast(`Erased ${r.records_erased} records and ${r.changes_erased} history entries of ${scope}.`);
      list.reload();
    });
  };

  const set = (k: keyof Filters) => (e: Event) => setForm({ ...form, [k]: (e.currentTarget as HTMLInputElement).value });
  return (
    <section aria-labelledby="records-title">
      <div class="screen-head">
        <h1 id="records-title" tabIndex={-1}>
          Records
        </h1>
        <div class="actions">
          <a class="button primary" href={href('records', 'new')} aria-disabled={!app.canWrite} onClick={(e) => !app.canWrite && e.preventDefault()}>
            New record
          </a>
          <a class="button" href={href('records', 'import')}>
            Import…
          </a>
          <button type="button" class="button" onClick={exportNow} disabled={busy}>
            Export these
          </button>
          <button type="button" class="button danger" onClick={forget} disabled={!app.canWrite || busy}>
            Forget a scope…
          </button>
        </div>
      </div>
      <ReadOnlyNote />
      <form class="filters card" onSubmit={submit} role="search" aria-label="Search records">
        <div class="field grow">
          <label for="flt-q">Text</label>
          <input id="flt-q" type="search" value={form.q} onInput={set('q')} placeholder="words in content, aliases, key or id" />
        </div>
        <div class="field">
          <label for="flt-type">Type</label>
          <select id="flt-type" value={form.type} onChange={set('type')}>
            <option value="">any</option>
            {types.map((t) => (
              <option key={t}>{t}</option>
            ))}
          </select>
        </div>
        <div class="field">
          <label for="flt-scope">Scope</label>
          <input id="flt-scope" value={form.scope} onInput={set('scope')} placeholder="user:u-789" />
        </div>
        <div class="field">
          <label for="flt-status">Status</label>
          <select id="flt-status" value={form.status} onChange={set('status')}>
            <option value="">any</option>
            <option>active</option>
            <option>paused</option>
            <option>archived</option>
            <option>proposed</option>
            <option>dormant</option>
          </select>
        </div>
        <div class="field">
          <label for="flt-valid">Validity</label>
          <select id="flt-valid" value={form.valid} onChange={set('valid')}>
            <option value="">any</option>
            <option value="now">valid now</option>
            <option value="expired">expired</option>
            <option value="future">not yet valid</option>
          </select>
        </div>
        <div class="field">
          <label for="flt-key">Key</label>
          <input id="flt-key" value={form.key} onInput={set('key')} placeholder="customer:u-789:profile" />
        </div>
        <div class="field end">
          <button type="submit" class="button primary">
            Search
          </button>
        </div>
      </form>
      <ErrorNote error={list.error} />
      {list.loading && !pages.data.length ? <Loading what="records" /> : null}
      <div class="table-scroll">
        <table class="data records" aria-describedby="records-count">
          <caption id="records-count" class="caption">
            {pages.data.length} record{pages.data.length === 1 ? '' : 's'}
            {pages.next ? ' shown; more below' : ''}
          </caption>
          <thead>
            <tr>
              <th scope="col">Id</th>
              <th scope="col">Record</th>
              <th scope="col">Type</th>
              <th scope="col">Scope</th>
              <th scope="col">Author</th>
              <th scope="col">Status</th>
              <th scope="col">Valid</th>
              <th scope="col" class="num">
                Priority
              </th>
              <th scope="col">Updated</th>
              <th scope="col" class="num">
                Injected
              </th>
            </tr>
          </thead>
          <tbody>
            {pages.data.map((r) => {
              const v = validity(r.valid_from, r.valid_until);
              return (
                <tr key={r.id} data-record={r.id}>
                  <th scope="row">
                    <a href={href('records', r.id)}>{r.id}</a>
                  </th>
                  <td class="preview" data-preview title={preview(r.content, 2000)}>
                    {preview(r.content) || <span class="muted">(no words)</span>}
                    {r.key ? <span class="muted small block ellipsis">{r.key}</span> : null}
                  </td>
                  <td>
                    {r.type} <span class="muted">{r.schema_version}</span>
                  </td>
                  <td>{r.scope.join(', ')}</td>
                  <td data-author>{r.author ?? <span class="muted">–</span>}</td>
                  <td>
                    <Badge tone={statusTone(r.status)}>{r.status}</Badge>
                  </td>
                  <td>{v === 'now' ? 'now' : v === 'expired' ? <Badge tone="muted">expired</Badge> : <Badge tone="info">from {time(r.valid_from).slice(0, 10)}</Badge>}</td>
                  <td class="num">{r.priority}</td>
                  <td title={time(r.updated_at)}>{ago(r.updated_at)}</td>
                  <td class="num">{r.access_count}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>
      {pages.next ? (
        <button type="button" class="button" onClick={more}>
          Load more
        </button>
      ) : null}
      {!list.loading && !pages.data.length && !list.error ? (
        <p class="muted">
          No record matches. <a href={href('records', 'new')} onClick={(e) => (e.preventDefault(), go(href('records', 'new')))}>Create one</a> or change the filters.
        </p>
      ) : null}
    </section>
  );
}
