// Keys: the tenant's gateway keys with their scopes, permissions and rate limits; create one
// (its secret is shown once, here) and revoke one (confirmed: not undoable).

import { useState } from 'preact/hooks';
import { ApiError, call, get, post } from '../api';
import { time } from '../format';
import type { Route } from '../router';
import type { GatewayKey } from '../types';
import { Badge, ErrorNote, Loading, ReadOnlyNote, asApiError, splitList, useAction, useApp, useLoad } from '../ui/core';

const PERMISSIONS: { id: string; text: string }[] = [
  { id: 'pin_release', text: 'pin a release with X-Memory-Version' },
  { id: 'assert_subject', text: 'name the end user with X-Memory-Subject' },
  { id: 'debug', text: 'ask for its own funnel trace with X-Memory-Debug' },
  { id: 'batches', text: 'use /v1/messages/batches (managed mode: shares the upstream workspace)' },
  { id: 'files', text: 'use /v1/files (managed mode: shares the upstream workspace)' },
  { id: 'upstream_other', text: 'any other /v1/* path (managed mode)' },
  { id: 'memory_read_tools', text: "memgate's read tools (memory_search, memory_get, memory_list)" },
  { id: 'memory_write_tools', text: "memgate's write tools too, into the caller's own scope: facts, preferences, decisions, tasks; never records that act, never priority 5" },
  { id: 'memory_write_any', text: "change what other agents, the memory tool or the observer wrote in the caller's own scope; never an operator's record, never a public one" },
  { id: 'memory_tool_backend', text: "memgate runs Anthropic's memory tool on the caller's /memories files" },
  { id: 'observe', text: "memgate learns from the caller's finished exchanges, where its release observes" },
];

export function Keys(_: { route: Route }) {
  const app = useApp();
  const { run, busy } = useAction();
  const keys = useLoad(() => get<{ data: GatewayKey[] }>('/keys'), []);
  const [showRevoked, setShowRevoked] = useState(false);
  const [secret, setSecret] = useState<{ key: string; name: string } | null>(null);

  const revoke = async (k: GatewayKey) => {
    const { ok } = await app.confirm({
      title: `Revoke ${k.name}?`,
      message: <p>Every caller using {k.prefix}… is refused within a second, on every replica. A revoked key cannot be brought back; issue a new one instead.</p>,
      confirmLabel: 'Revoke key',
      danger: true,
      typed: k.name,
    });
    if (ok && (await run(() => call('DELETE', `/keys/${encodeURIComponent(k.id)}`), `${k.name} revoked.`))) keys.reload();
  };

  const list = (keys.data?.data ?? []).filter((k) => showRevoked || !k.revoked_at);
  return (
    <section aria-labelledby="keys-title">
      <div class="screen-head">
        <h1 id="keys-title" tabIndex={-1}>
          Gateway keys
        </h1>
        <label class="inline">
          <input type="checkbox" checked={showRevoked} onChange={(e) => setShowRevoked(e.currentTarget.checked)} /> show revoked keys
        </label>
      </div>
      <ReadOnlyNote />
      <ErrorNote error={keys.error} />
      {keys.loading && !keys.data ? <Loading what="keys" /> : null}
      {secret ? <Secret secret={secret} onDone={() => setSecret(null)} /> : null}
      <div class="table-scroll">
        <table class="data">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Key</th>
              <th scope="col">Scopes</th>
              <th scope="col">Permissions</th>
              <th scope="col" class="num">
                Rate limit / min
              </th>
              <th scope="col">Created</th>
              <th scope="col">
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {list.map((k) => (
              <tr key={k.id} class={k.revoked_at ? 'revoked' : ''} data-key={k.name}>
                <th scope="row">{k.name}</th>
                <td>
                  <code>{k.prefix}…</code>
                </td>
                <td>{k.scopes.join(', ') || <span class="muted">none</span>}</td>
                <td>{k.permissions.length ? k.permissions.map((p) => <Badge key={p}>{p}</Badge>) : <span class="muted">none</span>}</td>
                <td class="num">{k.rate_limit_per_minute ?? <span class="muted">default</span>}</td>
                <td>{time(k.created_at)}</td>
                <td>
                  {k.revoked_at ? (
                    <Badge tone="muted">revoked {time(k.revoked_at).slice(0, 10)}</Badge>
                  ) : (
                    <button type="button" class="button small danger" disabled={!app.canWrite || busy} onClick={() => revoke(k)} aria-label={`Revoke ${k.name}`}>
                      Revoke…
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {app.canWrite ? (
        <CreateKey
          onCreated={(key, name) => {
            setSecret({ key, name });
            keys.reload();
          }}
        />
      ) : null}
    </section>
  );
}

function CreateKey({ onCreated }: { onCreated: (key: string, name: string) => void }) {
  const [name, setName] = useState('');
  const [scopes, setScopes] = useState('');
  const [permissions, setPermissions] = useState<string[]>([]);
  const [rate, setRate] = useState('');
  const [error, setError] = useState<ApiError | undefined>();
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const body: Record<string, unknown> = { name: name.trim(), scopes: splitList(scopes), permissions };
      if (rate.trim()) body.rate_limit_per_minute = Number(rate);
      const answer = await post<GatewayKey & { key: string }>('/keys', body);
      onCreated(answer.key, answer.name);
      setName('');
      setScopes('');
      setPermissions([]);
      setRate('');
    } catch (err) {
      setError(asApiError(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="card" onSubmit={submit} aria-labelledby="newkey-title">
      <h2 id="newkey-title">New key</h2>
      <div class="row">
        <div class="field">
          <label for="key-name">Name</label>
          <input id="key-name" required maxLength={64} value={name} onInput={(e) => setName(e.currentTarget.value)} placeholder="support-bot" />
        </div>
        <div class="field grow">
          <label for="key-scopes">Scopes</label>
          <input id="key-scopes" value={scopes} onInput={(e) => setScopes(e.currentTarget.value)} placeholder="team:support, role:agent" aria-describedby="key-scopes-hint" />
          <div class="hint" id="key-scopes-hint">
            What its requests may see, besides public records.
          </div>
        </div>
        <div class="field narrow">
          <label for="key-rate">Rate limit per minute</label>
          <input id="key-rate" type="number" min={1} value={rate} onInput={(e) => setRate(e.currentTarget.value)} placeholder="default" />
        </div>
      </div>
      <fieldset class="group">
        <legend>Permissions</legend>
        {PERMISSIONS.map((p) => (
          <div class="field checkbox" key={p.id}>
            <input
              id={`perm-${p.id}`}
              type="checkbox"
              checked={permissions.includes(p.id)}
              onChange={(e) => setPermissions(e.currentTarget.checked ? [...permissions, p.id] : permissions.filter((x) => x !== p.id))}
            />
            <label for={`perm-${p.id}`}>
              <code>{p.id}</code>: {p.text}
            </label>
          </div>
        ))}
      </fieldset>
      <ErrorNote error={error} />
      <button type="submit" class="button primary" disabled={busy || !name.trim()}>
        Create key
      </button>
    </form>
  );
}

function Secret({ secret, onDone }: { secret: { key: string; name: string }; onDone: () => void }) {
  const [copied, setCopied] = useState(false);
  return (
    <section class="card secret" role="alert" aria-labelledby="secret-title">
      <h2 id="secret-title">The key for {secret.name}: copy it now</h2>
      <p>This is the only time memgate shows it; it keeps only a hash.</p>
      <div class="row">
        <label class="sr-only" for="secret-value">
          New key
        </label>
        <input id="secret-value" class="mono grow" readOnly value={secret.key} onFocus={(e) => e.currentTarget.select()} />
        <button
          type="button"
          class="button"
          onClick={async () => {
            try {
              await navigator.clipboard.writeText(secret.key);
              setCopied(true);
            } catch {
              document.getElementById('secret-value')?.focus();
            }
          }}
        >
          {copied ? 'Copied' : 'Copy'}
        </button>
        <button type="button" class="button primary" onClick={onDone}>
          I have stored it
        </button>
      </div>
    </section>
  );
}
