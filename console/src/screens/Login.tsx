// Log in with the admin (or viewer) token: memgate answers with an HttpOnly session cookie, so
// the token is not kept by the page after this form.

import { useState } from 'preact/hooks';
import { ApiError, call } from '../api';
import type { Session } from '../types';

export function Login({ onLoggedIn, ended }: { onLoggedIn: (s: Session) => void; ended: boolean }) {
  const [token, setToken] = useState('');
  const [actor, setActor] = useState(localStorage.getItem('memgate.actor') ?? '');
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const actorOk = actor === '' || /^[A-Za-z0-9._:-]{1,64}$/.test(actor);

  const submit = async (e: Event) => {
    e.preventDefault();
    if (!actorOk) return;
    setBusy(true);
    setError(null);
    try {
      const session = await call<Session>('POST', '/console/session', { body: actor ? { token, actor } : { token } });
      localStorage.setItem('memgate.actor', actor);
      setToken('');
      onLoggedIn(session);
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, 'client_error', String(err)));
    } finally {
      setBusy(false);
    }
  };

  return (
    <main class="login" id="main">
      <form class="card login-card" onSubmit={submit} aria-labelledby="login-title">
        <h1 id="login-title" tabIndex={-1}>
          memgate console
        </h1>
        {ended ? (
          <p class="note" role="status">
            Your session has ended. Log in again to go on.
          </p>
        ) : null}
        <p class="muted">Log in with memgate's admin token (MEMGATE_ADMIN_TOKEN), or its viewer token for read-only access.</p>
        <div class="field">
          <label for="login-token">Token</label>
          <input id="login-token" type="password" autoComplete="current-password" required value={token} onInput={(e) => setToken(e.currentTarget.value)} autoFocus />
        </div>
        <div class="field">
          <label for="login-actor">Your name (optional)</label>
          <input
            id="login-actor"
            autoComplete="username"
            value={actor}
            aria-invalid={actorOk ? undefined : 'true'}
            aria-describedby="login-actor-hint"
            onInput={(e) => setActor(e.currentTarget.value)}
          />
          <div class="hint" id="login-actor-hint">
            Recorded with every change you make, as console:name. Letters, digits, . _ : - only.
          </div>
        </div>
        {error ? (
          <div class="note error" role="alert">
            {error.status === 401 ? 'That token is not accepted by this memgate.' : error.message}
          </div>
        ) : null}
        <button type="submit" class="button primary" disabled={busy || !token || !actorOk}>
          {busy ? 'Logging in…' : 'Log in'}
        </button>
      </form>
    </main>
  );
}
