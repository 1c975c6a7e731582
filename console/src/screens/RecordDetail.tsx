// One record: its envelope and content, status changes (pause, archive, activate; each with an
// undo), delete, and its history as a side-by-side diff per revision.

import { useState } from 'preact/hooks';
import { call, get, post } from '../api';
import { ago, time, validity } from '../format';
import { go, href } from '../router';
import type { Change, MemoryRecord } from '../types';
import { Badge, ErrorNote, Loading, ReadOnlyNote, useAction, useApp, useLoad } from '../ui/core';
import { JsonDiff } from '../ui/JsonDiff';
import { statusTone } from './Records';

export function RecordDetail({ id }: { id: string }) {
  const app = useApp();
  const { run, busy } = useAction();
  const record = useLoad(() => get<MemoryRecord>(`/memories/${encodeURIComponent(id)}`), [id]);
  const changes = useLoad(() => get<{ data: Change[] }>(`/memories/${encodeURIComponent(id)}/history`), [id]);
  const path = `/memories/${encodeURIComponent(id)}`;
  const reload = () => {
    record.reload();
    changes.reload();
  };

  const setStatus = async (action: 'pause' | 'archive' | 'activate') => {
    const r = record.data;
    if (!r) return;
    if (action === 'archive') {
      const { ok } = await app.confirm({
        title: `Archive ${r.id}?`,
        message: <p>An archived record is never injected. You can activate it again later; its history is kept.</p>,
        confirmLabel: 'Archive',
        danger: true,
      });
      if (!ok) return;
    }
    const previous = r.status;
    const undoAction = previous === 'active' ? 'activate' : previous === 'paused' ? 'pause' : 'archive';
    const done = { pause: `${r.id} paused: it is no longer injected.`, archive: `${r.id} archived.`, activate: `${r.id} is active again.` }[action];
    await run(() => post(`${path}/${action}`), done, {
      label: 'Undo',
      run: async () => {
        await run(() => post(`${path}/${undoAction}`), `${r.id} is ${previous} again.`);
        reload();
      },
    });
    reload();
  };

  const remove = async () => {
    const r = record.data;
    if (!r) return;
    const { ok } = await app.confirm({
      title: `Delete ${r.id}?`,
      message: <p>The record is removed from memory at once. Its history is kept; to bring it back, create it again from the last revision shown there.</p>,
      confirmLabel: 'Delete',
      danger: true,
      typed: r.id,
    });
    if (ok && (await run(() => call('DELETE', path), `${r.id} deleted.`))) go(href('records'));
  };

  const r = record.data;
  return (
    <section aria-labelledby="record-title">
      <p class="crumbs">
        <a href={href('records')}>← Records</a>
      </p>
      <div class="screen-head">
        <h1 id="record-title" tabIndex={-1}>
          {id}
        </h1>
        {r ? <Badge tone={statusTone(r.status)}>{r.status}</Badge> : null}
        {r ? (
          <div class="actions">
            <a class="button primary" href={href('records', r.id, 'edit')} aria-disabled={!app.canWrite} onClick={(e) => !app.canWrite && e.preventDefault()}>
              Edit
            </a>
            {r.status === 'active' ? (
              <button type="button" class="button" disabled={!app.canWrite || busy} onClick={() => setStatus('pause')}>
                Pause
              </button>
            ) : (
              <button type="button" class="button" disabled={!app.canWrite || busy} onClick={() => setStatus('activate')}>
                Activate
              </button>
            )}
            {r.status !== 'archived' ? (
              <button type="button" class="button" disabled={!app.canWrite || busy} onClick={() => setStatus('archive')}>
                Archive…
              </button>
            ) : null}
            <button type="button" class="button danger" disabled={!app.canWrite || busy} onClick={remove}>
              Delete…
            </button>
          </div>
        ) : null}
      </div>
      <ReadOnlyNote />
      <ErrorNote error={record.error} />
      {record.loading && !r ? <Loading what="the record" /> : null}
      {r ? <Envelope r={r} /> : null}
      <section class="card" aria-labelledby="history-title">
        <h2 id="history-title">History</h2>
        <ErrorNote error={changes.error} />
        {changes.data ? <HistoryList changes={changes.data.data} /> : changes.loading ? <Loading what="the history" /> : null}
      </section>
    </section>
  );
}

function Envelope({ r }: { r: MemoryRecord }) {
  const v = validity(r.valid_from, r.valid_until);
  return (
    <div class="two-col">
      <section class="card" aria-label="Envelope">
        <dl class="props">
          <dt>Type</dt>
          <dd>
            {r.type} <span class="muted">schema {r.schema_version}</span>
          </dd>
          <dt>Scope</dt>
          <dd>{r.scope.join(', ')}</dd>
          <dt>Key</dt>
          <dd>{r.key ?? <span class="muted">none</span>}</dd>
          <dt>Aliases</dt>
          <dd>{r.aliases.length ? r.aliases.join(' · ') : <span class="muted">none</span>}</dd>
          <dt>Priority</dt>
          <dd>{r.priority}</dd>
          <dt>Valid</dt>
          <dd>
            {time(r.valid_from)} → {time(r.valid_until)}{' '}
            {v !== 'now' ? <Badge tone={v === 'expired' ? 'muted' : 'info'}>{v === 'expired' ? 'expired' : 'not yet valid'}</Badge> : null}
          </dd>
          <dt>Revision</dt>
          <dd>
            {r.revision}, updated {time(r.updated_at)} ({ago(r.updated_at)})
          </dd>
          <dt>Written by</dt>
          <dd data-provenance>{writtenBy(r)}</dd>
          <dt>Injected</dt>
          <dd>
            {r.access_count} times{r.last_accessed_at ? `, last ${ago(r.last_accessed_at)}` : ''}
          </dd>
          <dt>Metadata</dt>
          <dd>
            <code class="wrap">{JSON.stringify(r.metadata)}</code>
          </dd>
        </dl>
      </section>
      <section class="card" aria-label="Content">
        <h2 class="h4">Content</h2>
        <pre class="json" tabIndex={0} aria-label="Content as JSON">
          {JSON.stringify(r.content, null, 2)}
        </pre>
      </section>
    </div>
  );
}

function HistoryList({ changes }: { changes: Change[] }) {
  const list = [...changes].sort((a, b) => (b.revision ?? 0) - (a.revision ?? 0) || b.at.localeCompare(a.at));
  const [open, setOpen] = useState<number>(0);
  if (!list.length) return <p class="muted">No changes recorded.</p>;
  return (
    <ol class="revisions">
      {list.map((c, i) => (
        <li key={i}>
          <button type="button" class="revision-toggle" aria-expanded={open === i} aria-controls={`rev-${i}`} onClick={() => setOpen(open === i ? -1 : i)}>
            <strong>
              {c.revision !== undefined ? `Revision ${c.revision}` : 'Change'}: {c.action}
            </strong>{' '}
            <span class="muted">
              by {c.actor}, {time(c.at)}
            </span>
          </button>
          {open === i ? (
            <div id={`rev-${i}`}>
              <JsonDiff before={c.before} after={c.after} caption={`Changes in ${c.revision !== undefined ? `revision ${c.revision}` : 'this change'}`} />
            </div>
          ) : null}
        </li>
      ))}
    </ol>
  );
}

/** Who wrote the live version and through what (`provenance`, set by memgate): the writer's kind,
 * the credential, the end user it was for, the request. An agent's or the observer's words are
 * said to be theirs, not operator policy. */
function writtenBy(r: MemoryRecord): string {
  const p = (r.provenance ?? {}) as Record<string, unknown>;
  const kinds: Record<string, string> = {
    operator: 'an operator',
    import: 'an import',
    agent: 'an agent (memory tools)',
    memory_tool: "an agent's memory file (memory tool)",
    observer: 'the observer, from the user\'s words',
  };
  const writer = typeof p.writer === 'string' ? (kinds[p.writer] ?? p.writer) : 'unknown';
  const parts = [writer];
  if (typeof p.credential === 'string') parts.push(`as ${p.credential}`);
  if (typeof p.subject === 'string') parts.push(`for ${p.subject}`);
  if (typeof p.approved_by === 'string') parts.push(`approved by ${p.approved_by}`);
  if (typeof p.request_id === 'string') parts.push(`request ${p.request_id}`);
  return parts.join(', ');
}
