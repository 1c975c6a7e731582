// Overview: the whole deployment's traffic and memory over the last hour or day, the health of
// the tenant's records, and what each release saves against injecting every visible record.

import { useState } from 'preact/hooks';
import { get } from '../api';
import { count, ms, percent, ratio, time } from '../format';
import type { Route } from '../router';
import { href } from '../router';
import type { DataHealth, History, ReleaseFigures } from '../types';
import { Chart } from '../ui/Chart';
import { ErrorNote, Loading, Segmented, Stat, useLoad } from '../ui/core';

export type Window = '1h' | '24h';
const WINDOWS: { value: Window; label: string }[] = [
  { value: '1h', label: 'Last hour' },
  { value: '24h', label: 'Last 24 hours' },
];

export function useWindowChoice() {
  const [win, setWin] = useState<Window>((sessionStorage.getItem('memgate.window') as Window) || '1h');
  const set = (w: Window) => {
    sessionStorage.setItem('memgate.window', w);
    setWin(w);
  };
  return [win, set] as const;
}

export function WindowPicker({ value, onChange }: { value: Window; onChange: (w: Window) => void }) {
  return <Segmented label="Time window" value={value} options={WINDOWS} onChange={onChange} />;
}

/** Whether the newest bucket is still filling (the current minute or five minutes). */
export function isPartial(h: History): boolean {
  const last = h.buckets[h.buckets.length - 1];
  return !!last && Date.parse(last.t) + h.bucket_secs * 1000 > Date.now();
}

export function Updated({ at, loading }: { at?: number; loading: boolean }) {
  return (
    <span class="muted updated" aria-live="off">
      {loading ? 'Updating…' : at ? `Updated ${new Date(at).toISOString().slice(11, 19)} UTC` : ''}
    </span>
  );
}

export function Overview(_: { route: Route }) {
  const [win, setWin] = useWindowChoice();
  const history = useLoad(() => get<History>('/metrics/history', { window: win }), [win], 15000);
  const releases = useLoad(() => get<{ data: ReleaseFigures[] }>('/metrics/releases', { window: win }), [win], 30000);
  const health = useLoad(() => get<DataHealth>('/health/data'), [], 60000);

  return (
    <section aria-labelledby="overview-title">
      <div class="screen-head">
        <h1 id="overview-title" tabIndex={-1}>
          Overview
        </h1>
        <WindowPicker value={win} onChange={setWin} />
        <Updated at={history.at} loading={history.loading} />
      </div>
      <ErrorNote error={history.error} title="Could not load the metrics history:" />
      {history.data ? <Traffic h={history.data} /> : history.loading ? <Loading what="metrics" /> : null}
      <div class="two-col">
        <section class="card" aria-labelledby="health-title">
          <h2 id="health-title">Data health</h2>
          <ErrorNote error={health.error} />
          {health.data ? <Health d={health.data} /> : health.loading ? <Loading what="data health" /> : null}
        </section>
        <section class="card" aria-labelledby="savings-title">
          <h2 id="savings-title">Token savings per release</h2>
          <p class="muted small">
            Tokens injected against what every record the caller could see would have cost in full ({win === '1h' ? 'last hour' : 'last 24 hours'}).
          </p>
          <ErrorNote error={releases.error} />
          {releases.data ? <Savings rows={releases.data.data} /> : releases.loading ? <Loading what="release figures" /> : null}
        </section>
      </div>
    </section>
  );
}

function Traffic({ h }: { h: History }) {
  const times = h.buckets.map((b) => Date.parse(b.t));
  const per = h.bucket_secs === 60 ? 'per minute' : 'per 5 minutes';
  const t = h.totals;
  const errors = t.errors.upstream + t.errors.memory;
  const nonzero = (v: number, calls: number) => (calls ? v : null);
  const partial = isPartial(h);
  return (
    <>
      <div class="stats" aria-label="Totals for the window">
        <Stat label="Requests" value={count(t.calls)} detail={`${count(t.calls / (h.buckets.length * (h.bucket_secs / 60)))} per minute`} />
        <Stat
          label="Memory ok"
          value={percent(ratio(t.memory.ok, t.calls))}
          detail={`${count(t.memory.skipped)} skipped · ${count(t.memory.degraded)} degraded`}
          tone={ratio(t.memory.degraded, t.calls) > 0.05 ? 'warn' : undefined}
        />
        <Stat label="Injected per call" value={`${ratio(t.injected_records, t.calls).toFixed(1)} records`} detail={`${count(ratio(t.injected_tokens, t.calls))} tokens per call`} />
        <Stat label="Added latency" value={`p50 ${ms(t.added_latency_ms.p50)}`} detail={`p99 ${ms(t.added_latency_ms.p99)}`} />
        <Stat
          label="Error rate"
          value={percent(ratio(errors, t.calls), 2)}
          detail={`${count(t.errors.upstream)} upstream · ${count(t.errors.memory)} memory · ${count(t.errors.rate_limited)} rate limited`}
          tone={ratio(errors, t.calls) > 0.02 ? 'bad' : undefined}
        />
      </div>
      <div class="charts">
        <Chart partial={partial} title={`Requests ${per}`} times={times} format={count} series={[{ name: 'calls', values: h.buckets.map((b) => b.calls), tone: 's1' }]} />
        <Chart
          partial={partial}
          title={`Memory status ${per}`}
          times={times}
          format={count}
          stacked
          series={[
            { name: 'ok', values: h.buckets.map((b) => b.memory.ok), tone: 's3' },
            { name: 'skipped', values: h.buckets.map((b) => b.memory.skipped), tone: 's6' },
            { name: 'degraded', values: h.buckets.map((b) => b.memory.degraded), tone: 's5' },
          ]}
        />
        <Chart
          partial={partial}
          title="Injected records per call"
          times={times}
          format={(v) => v.toFixed(1)}
          series={[{ name: 'records per call', values: h.buckets.map((b) => nonzero(ratio(b.injected_records, b.calls), b.calls)), tone: 's4' }]}
        />
        <Chart
          partial={partial}
          title="Injected tokens per call"
          times={times}
          format={count}
          series={[{ name: 'tokens per call', values: h.buckets.map((b) => nonzero(ratio(b.injected_tokens, b.calls), b.calls)), tone: 's2' }]}
        />
        <Chart
          partial={partial}
          title="Added latency (memgate's share)"
          times={times}
          format={ms}
          series={[
            { name: 'p50', values: h.buckets.map((b) => nonzero(b.added_latency_ms.p50, b.calls)), tone: 's1' },
            { name: 'p99', values: h.buckets.map((b) => nonzero(b.added_latency_ms.p99, b.calls)), tone: 's5', dashed: true },
          ]}
        />
        <Chart
          partial={partial}
          title={`Errors ${per}`}
          times={times}
          format={count}
          minMax={5}
          series={[
            { name: 'upstream', values: h.buckets.map((b) => b.errors.upstream), tone: 's5' },
            { name: 'memory', values: h.buckets.map((b) => b.errors.memory), tone: 's2', dashed: true },
            { name: 'rate limited', values: h.buckets.map((b) => b.errors.rate_limited), tone: 's4' },
            { name: 'client (4xx)', values: h.buckets.map((b) => b.errors.client), tone: 's6', dashed: true },
          ]}
        />
      </div>
    </>
  );
}

function Meter({ label, share, detail, warnBelow }: { label: string; share: number; detail: string; warnBelow?: number }) {
  const low = warnBelow !== undefined && share < warnBelow;
  return (
    <div class="meter">
      <div class="meter-head">
        <span>{label}</span>
        <strong>{percent(share)}</strong>
      </div>
      <meter min={0} max={1} low={warnBelow} optimum={1} value={share} aria-label={label} />
      <div class={`small ${low ? 'warn-text' : 'muted'}`}>{detail}</div>
    </div>
  );
}

function Health({ d }: { d: DataHealth }) {
  return (
    <div>
      <p class="small">
        {count(d.live)} live records of {count(d.records.total)} ({count(d.records.paused)} paused, {count(d.records.archived)} archived
        {d.records.proposed ? <>, <a href={href('review')}>{count(d.records.proposed)} awaiting review</a></> : null}
        {d.records.dormant ? `, ${count(d.records.dormant)} dormant` : ''}). Computed {time(d.computed_at)}.
      </p>
      <Meter label="Live records with content" share={d.non_empty_content.share} detail={`${count(d.non_empty_content.count)} of ${count(d.live)} have non-empty content`} warnBelow={0.98} />
      <Meter
        label="Live records not expired"
        share={d.future_valid_until.share}
        detail={`${count(d.live - d.future_valid_until.count)} expired but still active · ${count(d.not_yet_valid.count)} not valid yet`}
        warnBelow={0.95}
      />
      <Meter label="Live records injected at least once" share={1 - d.never_injected.share} detail={`${count(d.never_injected.count)} never injected`} />
      <h3 class="h4">Schema failures {d.schema_failures.count ? <span class="badge bad">{d.schema_failures.count}</span> : <span class="badge good">none</span>}</h3>
      {d.schema_failures.count ? (
        <ul class="plain small">
          {d.schema_failures.items.slice(0, 5).map((f) => (
            <li key={f.id}>
              <a href={href('records', f.id)}>{f.id}</a> ({f.type} {f.schema_version}): {f.problems.map((p) => `${p.path} ${p.message}`).join('; ')}
            </li>
          ))}
        </ul>
      ) : (
        <p class="small muted">Every live record passes the schema now loaded for it.</p>
      )}
      {d.never_injected.sample.length ? (
        <details class="small">
          <summary>Never injected (sample)</summary>
          <ul class="plain">
            {d.never_injected.sample.map((id) => (
              <li key={id}>
                <a href={href('records', id)}>{id}</a>
              </li>
            ))}
          </ul>
        </details>
      ) : null}
    </div>
  );
}

function Savings({ rows }: { rows: ReleaseFigures[] }) {
  return (
    <div class="table-scroll">
      <table class="data">
        <thead>
          <tr>
            <th scope="col">Release</th>
            <th scope="col" class="num">
              Calls
            </th>
            <th scope="col" class="num">
              Injected / call
            </th>
            <th scope="col" class="num">
              Visible / call
            </th>
            <th scope="col">Saved</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={r.release}>
              <th scope="row">{r.release}</th>
              <td class="num">{count(r.calls)}</td>
              <td class="num">{count(r.injected_tokens_per_call)}</td>
              <td class="num">{count(ratio(r.visible_tokens, r.calls))}</td>
              <td>
                {r.calls ? (
                  <span class="saving">
                    <meter min={0} max={1} value={r.saved_share} aria-label={`${r.release}: share of tokens saved`} />
                    <span>{percent(r.saved_share)}</span>
                  </span>
                ) : (
                  <span class="muted">no calls</span>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
