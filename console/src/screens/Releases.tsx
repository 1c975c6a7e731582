// Releases: one panel per release with its figures and charts (the error rate drawn against the
// guard's bound), its rollout (stage, canary share, allow-lists, guard) with controls to change
// it, promote and roll back (each with a reason, confirmed), the shadow comparison and the
// history as a timeline.

import { useState } from 'preact/hooks';
import { call, get, post } from '../api';
import { ago, count, ms, percent, ratio, time } from '../format';
import type { Route } from '../router';
import type { Change, History, Release, ReleaseFigures, ReleaseStats, Rollout, Stage } from '../types';
import { Chart } from '../ui/Chart';
import { Badge, ErrorNote, Loading, ReadOnlyNote, Stat, splitList, useAction, useApp, useLoad } from '../ui/core';
import { Updated, WindowPicker, isPartial, useWindowChoice, type Window } from './Overview';

interface Loaded {
  releases: Release[];
  figures: ReleaseFigures[];
  total: History;
  per: Record<string, History>;
  stats: Record<string, ReleaseStats>;
  history: Record<string, Change[]>;
}

async function loadAll(win: Window): Promise<Loaded> {
  const [{ data: releases }, { data: figures }, total] = await Promise.all([
    get<{ data: Release[] }>('/releases'),
    get<{ data: ReleaseFigures[] }>('/metrics/releases', { window: win }),
    get<History>('/metrics/history', { window: win }),
  ]);
  const per: Record<string, History> = {};
  const stats: Record<string, ReleaseStats> = {};
  const history: Record<string, Change[]> = {};
  await Promise.all(
    releases.map(async (r) => {
      const [h, s, c] = await Promise.all([
        get<History>('/metrics/history', { window: win, release: r.name }),
        get<ReleaseStats>(`/releases/${encodeURIComponent(r.name)}/stats`),
        get<{ data: Change[] }>(`/releases/${encodeURIComponent(r.name)}/history`),
      ]);
      per[r.name] = h;
      stats[r.name] = s;
      history[r.name] = c.data;
    }),
  );
  return { releases, figures, total, per, stats, history };
}

const STAGE_TONE: Record<Stage, string> = { active: 'good', canary: 'warn', shadow: 'info', available: '', retired: 'muted' };

export function Releases(_: { route: Route }) {
  const [win, setWin] = useWindowChoice();
  const data = useLoad(() => loadAll(win), [win], 15000);
  const order = (r: Release) => ['active', 'canary', 'shadow', 'available', 'retired'].indexOf(r.rollout.stage);
  return (
    <section aria-labelledby="releases-title">
      <div class="screen-head">
        <h1 id="releases-title" tabIndex={-1}>
          Releases
        </h1>
        <WindowPicker value={win} onChange={setWin} />
        <Updated at={data.at} loading={data.loading} />
      </div>
      <ReadOnlyNote />
      <ErrorNote error={data.error} title="Could not load the releases:" />
      {data.data ? (
        [...data.data.releases].sort((a, b) => order(a) - order(b) || a.name.localeCompare(b.name)).map((r) => <Panel key={r.name} release={r} d={data.data as Loaded} reload={data.reload} />)
      ) : data.loading ? (
        <Loading what="releases" />
      ) : null}
    </section>
  );
}

function Panel({ release: r, d, reload }: { release: Release; d: Loaded; reload: () => void }) {
  const f = d.figures.find((x) => x.release === r.name);
  const h = d.per[r.name];
  const s = d.stats[r.name]?.stats;
  const times = h.buckets.map((b) => Date.parse(b.t));
  const partial = isPartial(h);
  const bound = r.rollout.guard.max_error_rate;
  const id = `release-${r.name.replace(/[^A-Za-z0-9_-]/g, '-')}`;
  const state = r.rollout;
  return (
    <article class="card release" aria-labelledby={`${id}-title`} data-release={r.name}>
      <header class="release-head">
        <h2 id={`${id}-title`}>{r.name}</h2>
        <Badge tone={STAGE_TONE[state.stage]}>{state.stage}</Badge>
        {state.stage === 'canary' ? <Badge tone="warn">{state.canary_percent}% of subjects</Badge> : null}
        {state.stage === 'shadow' ? <Badge tone="info">{state.shadow_sample_percent}% sampled</Badge> : null}
        <span class="muted small">since {state.stage_since_ms ? `${time(state.stage_since_ms)} (${ago(state.stage_since_ms)})` : 'start'}</span>
        <span class="muted small settings">
          reads {r.schema_versions.join(', ')} · threshold {r.similarity_threshold} · budget {count(r.budget_tokens)} tokens · max {r.max_items} · placement {r.placement}
        </span>
      </header>
      {state.note ? <p class="note small">Note: {state.note}</p> : null}
      {f ? (
        <div class="stats compact">
          <Stat label="Share of calls" value={percent(f.share)} detail={`${count(f.calls)} calls`} />
          <Stat
            label="Error rate"
            value={percent(f.error_rate, 2)}
            detail={`guard bound ${percent(bound, 0)}${state.guard.enabled ? '' : ' (guard off)'}`}
            tone={f.error_rate > bound ? 'bad' : f.error_rate > bound / 2 ? 'warn' : undefined}
          />
          <Stat label="Injected tokens per call" value={count(f.injected_tokens_per_call)} detail={`${percent(f.saved_share)} saved vs. all visible`} />
          <Stat label="Added latency" value={`p50 ${ms(f.added_latency_ms.p50)}`} detail={`p99 ${ms(f.added_latency_ms.p99)}`} />
          {s && state.stage === 'canary' ? (
            <Stat
              label={`Guard window (${s.window.secs} s)`}
              value={percent(s.window.error_rate, 1)}
              detail={`${count(s.window.errors)} errors / ${count(s.window.calls)} calls${s.window.calls < state.guard.min_calls ? ` (verdict at ${state.guard.min_calls})` : ''}`}
              tone={s.window.error_rate > bound && s.window.calls >= state.guard.min_calls ? 'bad' : undefined}
            />
          ) : null}
        </div>
      ) : null}
      <div class="charts small">
        <Chart
          partial={partial}
          title="Error rate"
          times={times}
          format={(v) => percent(v, 1)}
          minMax={bound * 1.2}
          bound={{ value: bound, label: `guard bound ${percent(bound, 0)}` }}
          series={[{ name: 'error rate', values: h.buckets.map((b) => (b.calls ? (b.errors.upstream + b.errors.memory) / b.calls : null)), tone: 's5' }]}
          height={140}
        />
        <Chart
          partial={partial}
          title="Share of calls"
          times={times}
          format={(v) => percent(v, 0)}
          minMax={0.05}
          series={[{ name: 'share', values: h.buckets.map((b, i) => (d.total.buckets[i]?.calls ? b.calls / d.total.buckets[i].calls : null)), tone: 's1' }]}
          height={140}
        />
        <Chart
          partial={partial}
          title="Injected tokens per call"
          times={times}
          format={count}
          series={[{ name: 'tokens per call', values: h.buckets.map((b) => (b.calls ? ratio(b.injected_tokens, b.calls) : null)), tone: 's2' }]}
          height={140}
        />
        <Chart
          partial={partial}
          title="Added latency"
          times={times}
          format={ms}
          series={[
            { name: 'p50', values: h.buckets.map((b) => (b.calls ? b.added_latency_ms.p50 : null)), tone: 's1' },
            { name: 'p99', values: h.buckets.map((b) => (b.calls ? b.added_latency_ms.p99 : null)), tone: 's5', dashed: true },
          ]}
          height={140}
        />
      </div>
      <div class="two-col">
        <RolloutControls key={JSON.stringify(r.rollout)} release={r} reload={reload} />
        <div>
          {s && (s.shadow.sampled > 0 || state.stage === 'shadow') ? <Shadow s={d.stats[r.name]} /> : null}
          <Timeline changes={d.history[r.name] ?? []} name={r.name} />
        </div>
      </div>
    </article>
  );
}

function describe(before: Rollout, after: Rollout): string {
  if (after.stage === 'canary') return `Start a canary of this release for ${after.canary_percent}% of subjects${after.allow.subjects.length + after.allow.teams.length + after.allow.cidrs.length ? ' plus its allow-lists' : ''}.`;
  if (after.stage === 'shadow') return `Run this release's funnel in shadow on ${after.shadow_sample_percent}% of requests (nothing is sent).`;
  if (after.stage === 'retired') return 'Retire this release: no request reaches it, not even a pinned one.';
  if (after.stage === 'available' && before.stage !== 'available') return 'Withdraw this release: it serves only pinned requests.';
  return 'Change the rollout settings.';
}

function RolloutControls({ release: r, reload }: { release: Release; reload: () => void }) {
  const app = useApp();
  const { busy, run } = useAction();
  const s = r.rollout;
  const [stage, setStage] = useState<Stage>(s.stage === 'active' ? 'active' : s.stage);
  const [canary, setCanary] = useState(String(s.canary_percent || 5));
  const [sample, setSample] = useState(String(s.shadow_sample_percent || 10));
  const [subjects, setSubjects] = useState(s.allow.subjects.join(', '));
  const [teams, setTeams] = useState(s.allow.teams.join(', '));
  const [cidrs, setCidrs] = useState(s.allow.cidrs.join(', '));
  const [guardOn, setGuardOn] = useState(s.guard.enabled);
  const [bound, setBound] = useState(String(+(s.guard.max_error_rate * 100).toFixed(2)));
  const [windowSecs, setWindowSecs] = useState(String(s.guard.window_secs));
  const [minCalls, setMinCalls] = useState(String(s.guard.min_calls));
  const [promoteAfter, setPromoteAfter] = useState(String(s.guard.promote_after_secs));
  const id = `ro-${r.name.replace(/[^A-Za-z0-9_-]/g, '-')}`;
  const disabled = !app.canWrite || busy;
  const path = `/releases/${encodeURIComponent(r.name)}`;

  const apply = async (e: Event) => {
    e.preventDefault();
    const patch: Record<string, unknown> = {
      allow: { subjects: splitList(subjects), teams: splitList(teams), cidrs: splitList(cidrs) },
      guard: { enabled: guardOn, max_error_rate: Number(bound) / 100, window_secs: Number(windowSecs), min_calls: Number(minCalls), promote_after_secs: Number(promoteAfter) },
    };
    if (stage !== 'active') patch.stage = stage;
    if (stage === 'canary') patch.canary_percent = Number(canary);
    if (stage === 'shadow') patch.shadow_sample_percent = Number(sample);
    const after = { ...s, stage, canary_percent: Number(canary), shadow_sample_percent: Number(sample), allow: patch.allow as Rollout['allow'] };
    const { ok } = await app.confirm({ title: `Change the rollout of ${r.name}?`, message: <p>{describe(s, after)}</p>, confirmLabel: 'Apply' });
    if (!ok) return;
    if (await run(() => call('PATCH', path, { body: patch }), `${r.name}: rollout changed.`)) reload();
  };

  const promote = async () => {
    const { ok, reason } = await app.confirm({
      title: `Promote ${r.name}?`,
      message: <p>{r.name} becomes the active release for every request not routed elsewhere; the current active release becomes available. The guard's window starts again.</p>,
      confirmLabel: `Promote ${r.name}`,
      reason: { label: 'Reason (kept in the history)', required: true },
    });
    if (ok && (await run(() => post(`${path}/promote`, { reason }), `${r.name} is now the active release.`))) reload();
  };

  const rollback = async () => {
    const { ok, reason } = await app.confirm({
      title: `Roll back ${r.name}?`,
      message: <p>The {s.stage} of {r.name} is withdrawn at once on every replica: its subjects go back to the active release.</p>,
      confirmLabel: `Roll back ${r.name}`,
      danger: true,
      reason: { label: 'Reason (kept in the history)', required: true },
    });
    if (ok && (await run(() => post(`${path}/rollback`, { reason }), `${r.name} rolled back.`))) reload();
  };

  return (
    <form class="rollout" onSubmit={apply} aria-labelledby={`${id}-title`}>
      <h3 id={`${id}-title`} class="h4">
        Rollout <span class="sr-only">of {r.name}</span>
      </h3>
      {s.stage === 'active' ? (
        <p class="small muted">The active release serves everyone not routed elsewhere. Promote another release to replace it.</p>
      ) : (
        <div class="row">
          <div class="field">
            <label for={`${id}-stage`}>Stage</label>
            <select id={`${id}-stage`} value={stage} disabled={disabled} onChange={(e) => setStage(e.currentTarget.value as Stage)}>
              <option value="available">available (pinned requests only)</option>
              <option value="canary">canary</option>
              <option value="shadow">shadow</option>
              <option value="retired">retired</option>
            </select>
          </div>
          {stage === 'canary' ? (
            <div class="field narrow">
              <label for={`${id}-pct`}>Canary share (% of subjects)</label>
              <input id={`${id}-pct`} type="number" min={0} max={100} step={0.01} required value={canary} disabled={disabled} onInput={(e) => setCanary(e.currentTarget.value)} />
            </div>
          ) : null}
          {stage === 'shadow' ? (
            <div class="field narrow">
              <label for={`${id}-sample`}>Shadow sample (% of requests)</label>
              <input id={`${id}-sample`} type="number" min={0} max={100} step={0.01} required value={sample} disabled={disabled} onInput={(e) => setSample(e.currentTarget.value)} />
            </div>
          ) : null}
        </div>
      )}
      <details>
        <summary>Allow-lists and guard</summary>
        <div class="field">
          <label for={`${id}-subjects`}>Always route these subjects here</label>
          <input id={`${id}-subjects`} value={subjects} disabled={disabled} placeholder="u-1, u-2" onInput={(e) => setSubjects(e.currentTarget.value)} />
        </div>
        <div class="field">
          <label for={`${id}-teams`}>…and these teams</label>
          <input id={`${id}-teams`} value={teams} disabled={disabled} placeholder="qa" onInput={(e) => setTeams(e.currentTarget.value)} />
        </div>
        <div class="field">
          <label for={`${id}-cidrs`}>…and these client networks (CIDR)</label>
          <input id={`${id}-cidrs`} value={cidrs} disabled={disabled} placeholder="10.0.0.0/8" onInput={(e) => setCidrs(e.currentTarget.value)} />
        </div>
        <div class="field checkbox">
          <input id={`${id}-guard`} type="checkbox" checked={guardOn} disabled={disabled} onChange={(e) => setGuardOn(e.currentTarget.checked)} />
          <label for={`${id}-guard`}>Guard: roll the canary back by itself</label>
        </div>
        <div class="row">
          <div class="field narrow">
            <label for={`${id}-bound`}>Error-rate bound (%)</label>
            <input id={`${id}-bound`} type="number" min={0} max={100} step={0.1} value={bound} disabled={disabled} onInput={(e) => setBound(e.currentTarget.value)} />
          </div>
          <div class="field narrow">
            <label for={`${id}-window`}>Window (s)</label>
            <input id={`${id}-window`} type="number" min={1} max={3600} value={windowSecs} disabled={disabled} onInput={(e) => setWindowSecs(e.currentTarget.value)} />
          </div>
          <div class="field narrow">
            <label for={`${id}-min`}>Min. calls</label>
            <input id={`${id}-min`} type="number" min={0} value={minCalls} disabled={disabled} onInput={(e) => setMinCalls(e.currentTarget.value)} />
          </div>
          <div class="field narrow">
            <label for={`${id}-promote`}>Promote after (s, 0 = never)</label>
            <input id={`${id}-promote`} type="number" min={0} value={promoteAfter} disabled={disabled} onInput={(e) => setPromoteAfter(e.currentTarget.value)} />
          </div>
        </div>
      </details>
      <div class="actions">
        <button type="submit" class="button primary" disabled={disabled}>
          Apply rollout
        </button>
        {s.stage !== 'active' ? (
          <button type="button" class="button" disabled={disabled} onClick={promote}>
            Promote…
          </button>
        ) : null}
        {s.stage === 'canary' || s.stage === 'shadow' ? (
          <button type="button" class="button danger" disabled={disabled} onClick={rollback}>
            Roll back…
          </button>
        ) : null}
      </div>
    </form>
  );
}

function Shadow({ s }: { s: ReleaseStats }) {
  const sh = s.stats.shadow;
  return (
    <section class="shadow" aria-label="Shadow comparison">
      <h3 class="h4">Shadow comparison</h3>
      <p class="small muted">Against the active release, on sampled requests ({s.scope}).</p>
      <div class="stats compact">
        <Stat label="Sampled" value={count(sh.sampled)} />
        <Stat label="Records added" value={count(sh.ids_added)} detail={`${ratio(sh.ids_added, sh.sampled).toFixed(2)} per request`} />
        <Stat label="Records dropped" value={count(sh.ids_dropped)} detail={`${ratio(sh.ids_dropped, sh.sampled).toFixed(2)} per request`} />
        <Stat label="Token delta" value={`${sh.tokens_delta >= 0 ? '+' : ''}${count(sh.tokens_delta)}`} detail={`${ratio(sh.tokens_delta, sh.sampled) >= 0 ? '+' : ''}${ratio(sh.tokens_delta, sh.sampled).toFixed(0)} per request`} />
      </div>
      {sh.recent.length ? (
        <details class="small">
          <summary>Recent differences</summary>
          <ul class="plain">
            {[...sh.recent].reverse().map((x, i) => (
              <li key={i}>
                {x.added.length ? <span>+ {x.added.join(', ')} </span> : null}
                {x.dropped.length ? <span>− {x.dropped.join(', ')} </span> : null}
                <span class="muted">
                  ({x.tokens_delta >= 0 ? '+' : ''}
                  {x.tokens_delta} tokens)
                </span>
              </li>
            ))}
          </ul>
        </details>
      ) : null}
    </section>
  );
}

function summarize(c: Change): string {
  const b = c.before as Partial<Rollout> | null;
  const a = c.after as Partial<Rollout> | null;
  const parts: string[] = [];
  if (b?.stage !== a?.stage) parts.push(`${b?.stage ?? '–'} → ${a?.stage ?? '–'}`);
  if (a?.stage === 'canary' && b?.canary_percent !== a?.canary_percent) parts.push(`canary ${b?.canary_percent ?? 0}% → ${a?.canary_percent}%`);
  if (a?.stage === 'shadow' && b?.shadow_sample_percent !== a?.shadow_sample_percent) parts.push(`sample ${a?.shadow_sample_percent}%`);
  if (JSON.stringify(b?.guard) !== JSON.stringify(a?.guard)) parts.push('guard changed');
  if (JSON.stringify(b?.allow) !== JSON.stringify(a?.allow)) parts.push('allow-lists changed');
  return parts.join(', ') || 'no change';
}

function Timeline({ changes, name }: { changes: Change[]; name: string }) {
  const list = [...changes].sort((a, b) => b.at.localeCompare(a.at));
  return (
    <section aria-label={`History of ${name}`}>
      <h3 class="h4">History</h3>
      {list.length ? (
        <ol class="timeline">
          {list.slice(0, 12).map((c, i) => (
            <li key={i} class={`tl-${c.action}`}>
              <time dateTime={c.at}>{time(c.at)}</time>
              <div>
                <strong>{c.action}</strong> by <span class={c.actor === 'guard' ? 'warn-text' : ''}>{c.actor}</span>: {summarize(c)}
                {c.reason ? <div class="muted small">“{c.reason}”</div> : null}
              </div>
            </li>
          ))}
        </ol>
      ) : (
        <p class="small muted">No changes yet.</p>
      )}
    </section>
  );
}
