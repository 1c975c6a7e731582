// Import JSON Lines: a dry run first (new / existing / invalid per line, with the problems), then
// the import itself (confirmed), then an undo of exactly what it added (confirmed).

import { useState } from 'preact/hooks';
import { call, post } from '../api';
import { href } from '../router';
import type { ImportReport } from '../types';
import { Badge, ErrorNote, ReadOnlyNote, asApiError, useApp } from '../ui/core';
import type { ApiError } from '../api';

const EXAMPLE = [
  { type: 'fact', scope: ['public'], content: { statement: 'Returns are free within 30 days of delivery.' } },
  { id: 'mem-fact-0042', type: 'fact', scope: ['public'], content: { statement: 'Orders placed before 14:00 CET ship the same working day.' } },
  { type: 'preference', scope: ['user:u-789'], content: { topic: 'contact', preference: 'Chat only, never phone.' } },
]
  .map((l) => JSON.stringify(l))
  .join('\n');

type Phase = { kind: 'edit' } | { kind: 'previewed'; report: ImportReport } | { kind: 'applied'; report: ImportReport } | { kind: 'undone'; removed: number; id: string };

export function Import() {
  const app = useApp();
  const [text, setText] = useState('');
  const [phase, setPhase] = useState<Phase>({ kind: 'edit' });
  const [error, setError] = useState<ApiError | undefined>();
  const [busy, setBusy] = useState(false);

  const send = async (dryRun: boolean): Promise<ImportReport | undefined> => {
    setBusy(true);
    setError(undefined);
    try {
      return await call<ImportReport>('POST', '/import', { query: { dry_run: dryRun }, text: { body: text, type: 'application/x-ndjson' } });
    } catch (err) {
      const api = asApiError(err);
      const report = api.detail.report as ImportReport | undefined;
      if (report) setPhase({ kind: 'previewed', report });
      setError(api);
      return undefined;
    } finally {
      setBusy(false);
    }
  };

  const preview = async (e: Event) => {
    e.preventDefault();
    const report = await send(true);
    if (report) setPhase({ kind: 'previewed', report });
  };

  const apply = async () => {
    if (phase.kind !== 'previewed') return;
    const { ok } = await app.confirm({
      title: `Import ${phase.report.counts.new} new records?`,
      message: (
        <p>
          {phase.report.counts.new} records are added to tenant <strong>{app.tenant}</strong> in one transaction; {phase.report.counts.existing} lines whose id exists already are left alone. You can undo the import afterwards.
        </p>
      ),
      confirmLabel: `Import ${phase.report.counts.new} records`,
    });
    if (!ok) return;
    const report = await send(false);
    if (report) {
      setPhase({ kind: 'applied', report });
      app.toast(`Imported ${report.counts.new} records (${report.import_id}).`);
    }
  };

  const undo = async () => {
    if (phase.kind !== 'applied' || !phase.report.import_id) return;
    const id = phase.report.import_id;
    const { ok } = await app.confirm({
      title: 'Undo this import?',
      message: <p>The {phase.report.counts.new} records import {id} added are removed (records it did not add are not touched).</p>,
      confirmLabel: 'Undo import',
      danger: true,
    });
    if (!ok) return;
    setBusy(true);
    try {
      const r = await post<{ import_id: string; removed: number }>(`/imports/${encodeURIComponent(id)}/undo`);
      setPhase({ kind: 'undone', removed: r.removed, id });
      app.toast(`Import ${id} undone: ${r.removed} records removed.`);
    } catch (err) {
      setError(asApiError(err));
    } finally {
      setBusy(false);
    }
  };

  const report = phase.kind === 'previewed' || phase.kind === 'applied' ? phase.report : undefined;
  return (
    <section aria-labelledby="import-title">
      <p class="crumbs">
        <a href={href('records')}>← Records</a>
      </p>
      <div class="screen-head">
        <h1 id="import-title" tabIndex={-1}>
          Import records
        </h1>
      </div>
      <ReadOnlyNote />
      <form class="card" onSubmit={preview}>
        <div class="field">
          <label for="import-file">JSON Lines file</label>
          <input
            id="import-file"
            type="file"
            accept=".jsonl,.ndjson,.json,application/x-ndjson,text/plain"
            onChange={async (e) => {
              const file = e.currentTarget.files?.[0];
              if (file) {
                setText(await file.text());
                setPhase({ kind: 'edit' });
              }
            }}
          />
        </div>
        <div class="field">
          <label for="import-text">…or paste the lines (one record envelope per line, as export writes them)</label>
          <textarea
            id="import-text"
            class="mono"
            rows={8}
            value={text}
            placeholder={EXAMPLE}
            onInput={(e) => {
              setText(e.currentTarget.value);
              setPhase({ kind: 'edit' });
            }}
          />
        </div>
        <div class="actions">
          <button type="submit" class="button primary" disabled={busy || !text.trim() || phase.kind === 'applied'}>
            Preview (dry run)
          </button>
          <button type="button" class="button" onClick={() => setText(EXAMPLE)} disabled={busy}>
            Use an example
          </button>
        </div>
      </form>
      <ErrorNote error={error} />
      {report ? (
        <section class="card" aria-labelledby="report-title" data-import-phase={phase.kind}>
          <h2 id="report-title" tabIndex={-1}>
            {phase.kind === 'applied' ? `Imported: ${report.import_id}` : 'Dry run: nothing was written'}
          </h2>
          <p role="status">
            <Badge tone="good">{report.counts.new} new</Badge> <Badge>{report.counts.existing} existing</Badge> <Badge tone={report.counts.invalid ? 'bad' : ''}>{report.counts.invalid} invalid</Badge>
          </p>
          {phase.kind === 'previewed' ? (
            report.counts.invalid ? (
              <p class="warn-text">Fix the invalid lines first: an import adds every new line or none.</p>
            ) : report.counts.new ? (
              <button type="button" class="button primary" onClick={apply} disabled={busy || !app.canWrite}>
                Import {report.counts.new} new records…
              </button>
            ) : (
              <p class="muted">Nothing new to import.</p>
            )
          ) : (
            <button type="button" class="button danger" onClick={undo} disabled={busy || !app.canWrite}>
              Undo this import…
            </button>
          )}
          <div class="table-scroll">
            <table class="data">
              <thead>
                <tr>
                  <th scope="col" class="num">
                    Line
                  </th>
                  <th scope="col">Outcome</th>
                  <th scope="col">Record or problems</th>
                </tr>
              </thead>
              <tbody>
                {report.lines.map((l) => (
                  <tr key={l.line} class={l.status}>
                    <td class="num">{l.line}</td>
                    <td>
                      <Badge tone={l.status === 'new' ? 'good' : l.status === 'invalid' ? 'bad' : ''}>{l.status}</Badge>
                    </td>
                    <td>
                      {l.id ? phase.kind === 'applied' || l.status === 'existing' ? <a href={href('records', l.id)}>{l.id}</a> : <code>{l.id}</code> : null}
                      {l.problems ? (
                        <ul class="plain">
                          {l.problems.map((p) => (
                            <li key={p.path + p.message}>
                              <code>{p.path}</code> {p.message}
                            </li>
                          ))}
                        </ul>
                      ) : null}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </section>
      ) : null}
      {phase.kind === 'undone' ? (
        <section class="card" data-import-phase="undone">
          <h2 tabIndex={-1}>Import undone</h2>
          <p role="status">
            {phase.removed} records added by {phase.id} were removed.
          </p>
          <button
            type="button"
            class="button"
            onClick={() => {
              setText('');
              setPhase({ kind: 'edit' });
            }}
          >
            Start another import
          </button>
        </section>
      ) : null}
    </section>
  );
}
