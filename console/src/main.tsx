// The console's shell: login, the header bar (tenant, role, logout), the navigation, and the
// screen for the current address. See API.md for what it needs from memgate.

import { render } from 'preact';
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ApiError, call, currentTenant, setTenant, whenSessionEnds } from './api';
import { href, useRoute } from './router';
import type { Session } from './types';
import { AppContext, asApiError, type App, type ConfirmOptions, type ConfirmResult, type ToastAction } from './ui/core';
import { ConfirmDialog, Toasts, type PendingConfirm, type Toast } from './ui/dialogs';
import { Login } from './screens/Login';
import { Overview } from './screens/Overview';
import { Releases } from './screens/Releases';
import { Records } from './screens/Records';
import { Review } from './screens/Review';
import { Explain } from './screens/Explain';
import { Keys } from './screens/Keys';
import './styles.css';

const SCREENS = [
  { id: 'overview', label: 'Overview', view: Overview },
  { id: 'releases', label: 'Releases', view: Releases },
  { id: 'records', label: 'Records', view: Records },
  { id: 'review', label: 'Review', view: Review },
  { id: 'explain', label: 'Explain', view: Explain },
  { id: 'keys', label: 'Keys', view: Keys },
];

function Shell() {
  const [session, setSession] = useState<Session | null | undefined>(undefined);
  const [ended, setEnded] = useState(false);
  const [tenant, setTenantState] = useState(currentTenant());
  const [toasts, setToasts] = useState<Toast[]>([]);
  const [pending, setPending] = useState<PendingConfirm | null>(null);
  const route = useRoute();
  const heading = useRef<HTMLElement>(null);
  const nextToast = useRef(1);

  useEffect(() => {
    whenSessionEnds(() => {
      setEnded(true);
      setSession(null);
    });
    call<Session | { authenticated: false }>('GET', '/console/session').then(
      (s) => setSession(s.authenticated ? s : null),
      () => setSession(null),
    );
  }, []);

  const dismiss = useCallback((id: number) => setToasts((list) => list.filter((t) => t.id !== id)), []);
  const toast = useCallback(
    (message: string, options: { error?: boolean; action?: ToastAction } = {}) => {
      const id = nextToast.current++;
      setToasts((list) => [...list.slice(-3), { id, message, ...options }]);
      setTimeout(() => dismiss(id), options.action ? 15000 : options.error ? 12000 : 6000);
    },
    [dismiss],
  );
  const confirm = useCallback((options: ConfirmOptions) => new Promise<ConfirmResult>((resolve) => setPending({ options, resolve })), []);

  const app: App | null = useMemo(
    () => (session ? { session, tenant, canWrite: session.role === 'admin', toast, confirm } : null),
    [session, tenant, toast, confirm],
  );

  // Move focus to the new screen's heading, so keyboard and screen-reader users land on it.
  const screenId = SCREENS.some((s) => s.id === route.screen) ? route.screen : 'overview';
  const first = useRef(true);
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    const h = document.querySelector<HTMLElement>('main h1');
    h?.focus();
  }, [screenId, route.parts.join('/')]);

  useEffect(() => {
    const s = SCREENS.find((x) => x.id === screenId);
    document.title = `${s?.label ?? 'Console'} · memgate console`;
  }, [screenId]);

  if (session === undefined) {
    return (
      <p class="boot" role="status">
        Connecting to memgate…
      </p>
    );
  }
  if (!session || !app) {
    return (
      <Login
        ended={ended}
        onLoggedIn={(s) => {
          setEnded(false);
          setSession(s);
        }}
      />
    );
  }

  const Screen = SCREENS.find((s) => s.id === screenId)?.view ?? Overview;
  const tenants = [...new Set([...session.tenants, tenant])].sort();
  const logout = async () => {
    try {
      await call('DELETE', '/console/session');
    } catch (error) {
      toast(asApiError(error).message, { error: true });
    }
    setSession(null);
  };

  return (
    <AppContext.Provider value={app}>
      <a class="skip" href="#main" onClick={(e) => {
        e.preventDefault();
        document.querySelector<HTMLElement>('main h1')?.focus();
      }}>
        Skip to content
      </a>
      <header class="topbar">
        <span class="brand">memgate console</span>
        <div class="topbar-right">
          <label class="inline" for="tenant-picker">
            Tenant
          </label>
          <select
            id="tenant-picker"
            value={tenant}
            onChange={(e) => {
              const value = e.currentTarget.value;
              if (value === '__other__') {
                const typed = prompt('Tenant name (A-Z, a-z, 0-9, . _ : -)')?.trim();
                if (typed && /^[A-Za-z0-9._:-]{1,64}$/.test(typed)) {
                  setTenant(typed);
                  setTenantState(typed);
                } else e.currentTarget.value = tenant;
                return;
              }
              setTenant(value);
              setTenantState(value);
            }}
          >
            {tenants.map((t) => (
              <option key={t} value={t}>
                {t}
              </option>
            ))}
            <option value="__other__">Other tenant…</option>
          </select>
          <span class={`badge ${session.role === 'admin' ? 'role-admin' : 'role-viewer'}`} title={session.role === 'viewer' ? 'read-only' : 'may change everything'}>
            {session.role}
          </span>
          <span class="muted actor">{session.actor}</span>
          <button type="button" class="button small" onClick={logout}>
            Log out
          </button>
        </div>
      </header>
      <div class="layout">
        <nav class="sidenav" aria-label="Console">
          <ul>
            {SCREENS.map((s) => (
              <li key={s.id}>
                <a href={href(s.id)} aria-current={s.id === screenId ? 'page' : undefined}>
                  {s.label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <main id="main" ref={heading}>
          <Screen key={`${tenant}:${screenId}`} route={route} />
        </main>
      </div>
      <Toasts toasts={toasts} dismiss={dismiss} />
      <ConfirmDialog pending={pending} onDone={() => setPending(null)} />
    </AppContext.Provider>
  );
}

window.addEventListener('unhandledrejection', (e) => {
  if (e.reason instanceof ApiError) e.preventDefault();
});

const mount = document.getElementById('app');
if (mount) render(<Shell />, mount);
