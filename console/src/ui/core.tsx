// What every screen shares: the session and role, toasts (with an undo action where the API
// allows one), confirmation dialogs, data loading, and small presentational pieces.

import { createContext, type ComponentChildren } from 'preact';
import { useCallback, useContext, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from '../api';
import type { Session } from '../types';

export interface ToastAction {
  label: string;
  run: () => void | Promise<void>;
}

export interface ConfirmOptions {
  title: string;
  message: ComponentChildren;
  confirmLabel: string;
  danger?: boolean;
  /** Ask for a reason (recorded in the history). */
  reason?: { label: string; required: boolean };
  /** The user must type this text to confirm (irreversible actions). */
  typed?: string;
}

export interface ConfirmResult {
  ok: boolean;
  reason: string;
}

export interface App {
  session: Session;
  tenant: string;
  canWrite: boolean;
  toast: (message: string, options?: { error?: boolean; action?: ToastAction }) => void;
  confirm: (options: ConfirmOptions) => Promise<ConfirmResult>;
}

export const AppContext = createContext<App | null>(null);

export function useApp(): App {
  const app = useContext(AppContext);
  if (!app) throw new Error('useApp outside the app');
  return app;
}

export interface Loaded<T> {
  data?: T;
  error?: ApiError;
  loading: boolean;
  reload: () => void;
  /** When the data last arrived. */
  at?: number;
}

/** Loads data when `deps` change, and again every `refreshMs` if given (keeping the old data). */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[], refreshMs?: number): Loaded<T> {
  const [state, setState] = useState<{ data?: T; error?: ApiError; loading: boolean; at?: number }>({ loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => live && setState({ data, loading: false, at: Date.now() }),
      (error) => live && setState((s) => ({ data: s.data, error: asApiError(error), loading: false, at: s.at })),
    );
    return () => {
      live = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, tick]);
  useEffect(() => {
    if (!refreshMs) return undefined;
    const timer = setInterval(() => {
      if (!document.hidden) setTick((n) => n + 1);
    }, refreshMs);
    return () => clearInterval(timer);
  }, [refreshMs]);
  const reload = useCallback(() => setTick((n) => n + 1), []);
  return { ...state, reload };
}

export function asApiError(error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  return new ApiError(0, 'client_error', error instanceof Error ? error.message : String(error));
}

/** Runs an action, reporting failures as a toast; returns whether it succeeded. */
export function useAction() {
  const app = useApp();
  const [busy, setBusy] = useState(false);
  const run = useCallback(
    async (action: () => Promise<unknown>, done?: string, undo?: ToastAction): Promise<boolean> => {
      setBusy(true);
      try {
        await action();
        if (done) app.toast(done, { action: undo });
        return true;
      } catch (error) {
        app.toast(asApiError(error).message, { error: true });
        return false;
      } finally {
        setBusy(false);
      }
    },
    [app],
  );
  return { busy, run };
}

export function ErrorNote({ error, title }: { error?: ApiError; title?: string }) {
  if (!error) return null;
  return (
    <div class="note error" role="alert">
      <strong>{title ?? 'memgate refused this'}</strong>{' '}
      <span>{error.message}</span>
      {error.code ? <code class="code">{error.code}</code> : null}
    </div>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p class="muted" role="status">
      Loading {what}…
    </p>
  );
}

export function Stat({ label, value, detail, tone }: { label: string; value: ComponentChildren; detail?: ComponentChildren; tone?: 'bad' | 'warn' | 'good' }) {
  return (
    <div class={`stat${tone ? ` ${tone}` : ''}`}>
      <div class="stat-label">{label}</div>
      <div class="stat-value">{value}</div>
      {detail ? <div class="stat-detail">{detail}</div> : null}
    </div>
  );
}

export function Badge({ children, tone }: { children: ComponentChildren; tone?: string }) {
  return <span class={`badge${tone ? ` ${tone}` : ''}`}>{children}</span>;
}

/** A radio group drawn as a segmented control: one tab stop, arrow keys move. */
export function Segmented<T extends string>({ label, value, options, onChange }: { label: string; value: T; options: { value: T; label: string }[]; onChange: (v: T) => void }) {
  const name = useRef(`seg-${Math.random().toString(36).slice(2)}`).current;
  return (
    <fieldset class="segmented">
      <legend class="sr-only">{label}</legend>
      {options.map((o) => (
        <label key={o.value} class={o.value === value ? 'on' : ''}>
          <input type="radio" name={name} value={o.value} checked={o.value === value} onChange={() => onChange(o.value)} />
          <span>{o.label}</span>
        </label>
      ))}
    </fieldset>
  );
}

/** Updates "x s ago" text every few seconds. */
export function useNow(everyMs = 5000): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), everyMs);
    return () => clearInterval(t);
  }, [everyMs]);
  return now;
}

export function splitList(text: string): string[] {
  return text
    .split(/[,\n]/)
    .map((s) => s.trim())
    .filter(Boolean);
}

export function ReadOnlyNote() {
  const app = useApp();
  if (app.canWrite) return null;
  return <p class="note">This session is read-only (viewer): changes are switched off.</p>;
}
