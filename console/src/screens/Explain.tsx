// Explain: for a Messages body (pasted, or a recent request's) and a caller, what the funnel
// matched, what each layer kept and removed (with scores and reasons), the rendered block and
// where it would be placed. Nothing is sent upstream.

import { useState } from 'preact/hooks';
import { get, post } from '../api';
import { ago, count } from '../format';
import { href, type Route } from '../router';
import type { Explanation, GatewayKey, LayerTrace, RecentRequest, Release } from '../types';
import { Badge, ErrorNote, Loading, asApiError, splitList, useLoad } from '../ui/core';
import type { ApiError } from '../api';

const EXAMPLE = JSON.stringify(
  {
    model: 'claude-sonnet-4-5',
    max_tokens: 300,
    system: [{ type: 'text', text: 'You are the support assistant of an online shop.', cache_control: { type: 'ephemeral' } }],
    messages: [{ role: 'user', content: 'When will my order arrive? I asked for next week delivery.' }],
  },
  null,
  2,
);

const LAYER_TEXT: Record<string, string> = {
  scope: 'Scope: records sharing a scope with the caller',
  temporal: 'Temporal: valid now, active, of a schema version the release reads',
  semantic: 'Semantic: named exactly in the query, or similar enough',
  token_density: 'Token density: best first, within the budget and item cap',
};

export function Explain({ route }: { route: Route }) {
  const [source, setSource] = useState<'paste' | 'recent'>(route.params.get('request') ? 'recent' : 'paste');
  const [body, setBody] = useState(EXAMPLE);
  const [requestId, setRequestId] = useState(route.params.get('request') ?? '');
  const [subject, setSubject] = useState('u-789');
  const [teams, setTeams] = useState('support');
  const [scopes, setScopes] = useState('');
  const [keyId, setKeyId] = useState('');
  const [release, setRelease] = useState('');
  const [result, setResult] = useState<Explanation | undefined>();
  const [error, setError] = useState<ApiError | undefined>();
  const [busy, setBusy] = useState(false);
  const releases = useLoad(() => get<{ data: Release[] }>('/releases'), []);
  const keys = useLoad(() => get<{ data: GatewayKey[] }>('/keys'), []);
  const recent = useLoad(() => get<{ replica: string; data: RecentRequest[] }>('/requests/recent', { limit: 50 }), [], 20000);

  const run = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    let input: Record<string, unknown>;
    if (source === 'recent') {
      if (!requestId) {
        setError(asApiError(new Error('Pick a recent request first.')));
        return;
      }
      input = { request_id: requestId };
    } else {
      let request: unknown;
      try {
        request = JSON.parse(body);
      } catch (err) {
        setError(asApiError(new Error(`The Messages body is not valid JSON: ${(err as Error).message}`)));
        return;
      }
      const caller: Record<string, unknown> = { scopes: [...splitList(teams).map((t) => (t.includes(':') ? t : `team:${t}`)), ...splitList(scopes)] };
      if (subject.trim()) caller.subject = subject.trim();
      if (keyId) caller.key_id = keyId;
      input = { request, caller };
    }
    if (release) input.release = release;
    setBusy(true);
    try {
      setResult(await post<Explanation>('/explain', input));
      requestAnimationFrame(() => document.getElementById('explain-result')?.focus());
    } catch (err) {
      setError(asApiError(err));
      setResult(undefined);
    } finally {
      setBusy(false);
    }
  };

  return (
    <section aria-labelledby="explain-title">
      <div class="screen-head">
        <h1 id="explain-title" tabIndex={-1}>
          Explain
        </h1>
        <span class="muted small">What memory a request would get, layer by layer. Nothing is sent upstream.</span>
      </div>
      <form class="card explain-form" onSubmit={run}>
        <fieldset class="segmented-row">
          <legend>Request</legend>
          <label class="inline">
            <input type="radio" name="source" checked={source === 'paste'} onChange={() => setSource('paste')} /> Paste a Messages body
          </label>
          <label class="inline">
            <input type="radio" name="source" checked={source === 'recent'} onChange={() => setSource('recent')} /> Pick a recent request
          </label>
        </fieldset>
        {source === 'paste' ? (
          <div class="two-col">
            <div class="field">
              <label for="explain-body">Messages body (JSON)</label>
              <textarea id="explain-body" class="mono" rows={11} value={body} onInput={(e) => setBody(e.currentTarget.value)} spellcheck={false} />
            </div>
            <fieldset class="group">
              <legend>Caller</legend>
              <div class="field">
                <label for="explain-subject">Subject (end user)</label>
                <input id="explain-subject" value={subject} onInput={(e) => setSubject(e.currentTarget.value)} placeholder="u-789" />
                <div class="hint">Adds the scope user:&lt;subject&gt;.</div>
              </div>
              <div class="field">
                <label for="explain-teams">Teams</label>
                <input id="explain-teams" value={teams} onInput={(e) => setTeams(e.currentTarget.value)} placeholder="support, sales" />
              </div>
              <div class="field">
                <label for="explain-scopes">Other scopes</label>
                <input id="explain-scopes" value={scopes} onInput={(e) => setScopes(e.currentTarget.value)} placeholder="role:agent" />
              </div>
              <div class="field">
                <label for="explain-key">As gateway key</label>
                <select id="explain-key" value={keyId} onChange={(e) => setKeyId(e.currentTarget.value)}>
                  <option value="">none (only the scopes above)</option>
                  {(keys.data?.data ?? [])
                    .filter((k) => !k.revoked_at)
                    .map((k) => (
                      <option key={k.id} value={k.id}>
                        {k.name} ({k.scopes.join(', ') || 'no scopes'})
                      </option>
                    ))}
                </select>
              </div>
            </fieldset>
          </div>
        ) : (
          <RecentPicker recent={recent} value={requestId} onChange={setRequestId} />
        )}
        <div class="row">
          <div class="field">
            <label for="explain-release">Release</label>
            <select id="explain-release" value={release} onChange={(e) => setRelease(e.currentTarget.value)}>
              <option value="">the active release{source === 'recent' ? ' (or the request’s own)' : ''}</option>
              {(releases.data?.data ?? []).map((r) => (
                <option key={r.name} value={r.name}>
                  {r.name} ({r.rollout.stage})
                </option>
              ))}
            </select>
          </div>
          <div class="field end">
            <button type="submit" class="button primary" disabled={busy}>
              {busy ? 'Explaining…' : 'Explain'}
            </button>
          </div>
        </div>
      </form>
      <ErrorNote error={error} title="Explain failed:" />
      {result ? <Result r={result} /> : null}
    </section>
  );
}

function RecentPicker({ recent, value, onChange }: { recent: ReturnType<typeof useLoad<{ replica: string; data: RecentRequest[] }>>; value: string; onChange: (id: string) => void }) {
  if (recent.error) return <ErrorNote error={recent.error} />;
  if (!recent.data) return <Loading what="recent requests" />;
  return (
    <fieldset class="group">
      <legend>Recent requests on replica {recent.data.replica}</legend>
      <div class="table-scroll recent">
        <table class="data">
          <thead>
            <tr>
              <th scope="col">
                <span class="sr-only">Pick</span>
              </th>
              <th scope="col">When</th>
              <th scope="col">Caller</th>
              <th scope="col">Release</th>
              <th scope="col">Memory</th>
              <th scope="col">What the person wrote</th>
            </tr>
          </thead>
          <tbody>
            {recent.data.data.map((r) => (
              <tr key={r.request_id} class={value === r.request_id ? 'selected' : ''}>
                <td>
                  <input
                    type="radio"
                    name="recent"
                    id={`recent-${r.request_id}`}
                    checked={value === r.request_id}
                    disabled={!r.explainable}
                    onChange={() => onChange(r.request_id)}
                    aria-label={`${r.request_id}: ${r.query_preview}`}
                  />
                </td>
                <td>
                  <label for={`recent-${r.request_id}`}>{ago(r.at)}</label>
                </td>
                <td>
                  {r.caller.name ?? r.caller.kind}
                  {r.caller.subject ? <span class="muted"> · {r.caller.subject}</span> : null}
                </td>
                <td>{r.release}</td>
                <td>
                  {r.memory_status} · {r.injected}
                </td>
                <td class="ellipsis">{r.query_preview}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </fieldset>
  );
}

function placement(r: Explanation): string {
  if (!r.block || !r.placed_in) return 'Nothing injected: no record survived the funnel.';
  if (r.placed_in === 'system') {
    const system = r.request.system;
    const blocks = Array.isArray(system) ? system : [];
    const at = blocks.findIndex((b) => typeof (b as { text?: string }).text === 'string' && (b as { text: string }).text.includes('<MEMORY_CONTEXT'));
    return `Appended to system as block ${at + 1} of ${blocks.length}, after the client's own system blocks (and after their last cache_control breakpoint), so the cached prefix is untouched.`;
  }
  const messages = (r.request.messages as { role: string; content: unknown }[]) ?? [];
  const last = messages.length - 1 - [...messages].reverse().findIndex((m) => m.role === 'user');
  const content = messages[last]?.content;
  const n = Array.isArray(content) ? content.length : 1;
  return `Added as the trailing block (${n} of ${n}) of the last user turn (message ${last + 1}), after the client's last cache_control breakpoint.`;
}

function Result({ r }: { r: Explanation }) {
  const summary = r.records ?? {};
  const label = (id: string) => {
    const s = summary[id];
    return s ? `${s.type}${s.key ? ` · ${s.key}` : ''} · p${s.priority} · ${s.tokens} tokens` : '';
  };
  const threshold = (layer: LayerTrace) => {
    const m = layer.removed?.map((x) => / below ([0-9.]+)/.exec(x.reason)?.[1]).find(Boolean);
    return m ? Number(m) : undefined;
  };
  return (
    <section class="explain-result" aria-labelledby="explain-result" data-explained={r.query?.text ? 'yes' : 'no'}>
      <h2 id="explain-result" tabIndex={-1}>
        Result for release {r.release}
      </h2>
      <div class="card">
        <dl class="props">
          <dt>Matched text</dt>
          <dd>{r.query?.text ? <q class="query">{r.query.text}</q> : <span class="muted">none: the last user turn has no words to match</span>}</dd>
          <dt>Caller scopes</dt>
          <dd>{r.caller.scopes.join(', ')}</dd>
          <dt>Memory</dt>
          <dd>
            <Badge tone={r.status === 'ok' ? 'good' : 'warn'}>{r.status}</Badge> {r.injected.length} injected, {r.stubs.length} stubs, {count(r.tokens)} tokens
            {r.degraded_reason ? <span class="warn-text"> ({r.degraded_reason})</span> : null}
          </dd>
          <dt>Placement</dt>
          <dd>{placement(r)}</dd>
        </dl>
      </div>
      <ol class="funnel">
        {(r.trace?.layers ?? []).map((layer) => {
          const t = threshold(layer);
          return (
            <li key={layer.layer} class="card layer" data-layer={layer.layer}>
              <h3 class="h4">
                {LAYER_TEXT[layer.layer] ?? layer.layer}
                <span class="layer-count">
                  {count(layer.input)} → {count(layer.output)}
                  {layer.removed_count ? <span class="muted"> ({count(layer.removed_count)} removed)</span> : null}
                </span>
              </h3>
              <div class="two-col tight">
                <div>
                  <h4 class="h5">Kept</h4>
                  {layer.kept?.length ? (
                    <ul class="plain kept">
                      {layer.kept.map((k) => (
                        <li key={k.id}>
                          <a href={href('records', k.id)}>{k.id}</a> <span class="muted small">{label(k.id)}</span>
                          {k.exact ? <Badge tone="info">exact match</Badge> : null}
                          {typeof k.score === 'number' ? <Score score={k.score} threshold={t} /> : null}
                          {k.tokens !== undefined && layer.layer === 'token_density' ? <span class="small"> {k.tokens} tokens</span> : null}
                        </li>
                      ))}
                      {layer.output > layer.kept.length ? <li class="muted small">…and {layer.output - layer.kept.length} more</li> : null}
                    </ul>
                  ) : (
                    <p class="muted small">{layer.output ? `${layer.output} records (not listed)` : 'none'}</p>
                  )}
                </div>
                <div>
                  <h4 class="h5">Removed</h4>
                  {layer.removed?.length ? (
                    <details open={layer.layer !== 'scope'}>
                      <summary>
                        {layer.removed.length} listed{layer.removed_count > layer.removed.length ? ` of ${layer.removed_count}` : ''}
                      </summary>
                      <ul class="plain removed">
                        {layer.removed.map((x) => (
                          <li key={x.id}>
                            <a href={href('records', x.id)}>{x.id}</a>: {x.reason}
                            {typeof x.score === 'number' ? <meter class="score-bar" min={0} max={1} value={x.score} aria-hidden="true" /> : null}
                          </li>
                        ))}
                      </ul>
                    </details>
                  ) : (
                    <p class="muted small">{layer.removed_count ? `${layer.removed_count} (not listed)` : 'none'}</p>
                  )}
                </div>
              </div>
            </li>
          );
        })}
      </ol>
      {r.trace?.notes?.length ? (
        <ul class="note">
          {r.trace.notes.map((n) => (
            <li key={n}>{n}</li>
          ))}
        </ul>
      ) : null}
      <section class="card" aria-labelledby="block-title">
        <h3 id="block-title" class="h4">
          Rendered block
        </h3>
        {r.block ? (
          <pre class="block" tabIndex={0} aria-label="The rendered MEMORY_CONTEXT block">
            {r.block}
          </pre>
        ) : (
          <p class="muted">No block: nothing to inject.</p>
        )}
        <details>
          <summary>The request as it would go upstream</summary>
          <pre class="json" tabIndex={0}>
            {JSON.stringify(r.request, null, 2)}
          </pre>
        </details>
      </section>
    </section>
  );
}

function Score({ score, threshold }: { score: number; threshold?: number }) {
  const pass = threshold === undefined || score >= threshold;
  return (
    <span class={`score ${pass ? 'pass' : 'fail'}`}>
      <meter min={0} max={1} value={score} aria-hidden="true" />
      <span>
        similarity {score.toFixed(3)}
        {threshold !== undefined ? ` (threshold ${threshold.toFixed(3)})` : ''}
      </span>
    </span>
  );
}
