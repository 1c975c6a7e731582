// The confirmation dialog (native <dialog>: focus stays inside, Escape cancels) and the toasts.
// Every destructive action in the console goes through `confirm`; irreversible ones ask the
// operator to type what will be destroyed.

import { useEffect, useRef, useState } from 'preact/hooks';
import type { ConfirmOptions, ConfirmResult, ToastAction } from './core';

export interface PendingConfirm {
  options: ConfirmOptions;
  resolve: (result: ConfirmResult) => void;
}

export function ConfirmDialog({ pending, onDone }: { pending: PendingConfirm | null; onDone: () => void }) {
  const ref = useRef<HTMLDialogElement>(null);
  const [reason, setReason] = useState('');
  const [typed, setTyped] = useState('');
  const opener = useRef<Element | null>(null);

  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (pending && !dialog.open) {
      opener.current = document.activeElement;
      setReason('');
      setTyped('');
      dialog.showModal();
    } else if (!pending && dialog.open) {
      dialog.close();
    }
  }, [pending]);

  const finish = (ok: boolean) => {
    if (!pending) return;
    pending.resolve({ ok, reason: reason.trim() });
    onDone();
    const back = opener.current;
    if (back instanceof HTMLElement && back.isConnected) back.focus();
  };

  const o = pending?.options;
  const reasonMissing = !!o?.reason?.required && !reason.trim();
  const typedMissing = !!o?.typed && typed.trim() !== o.typed;
  return (
    <dialog
      ref={ref}
      class="dialog"
      aria-labelledby="confirm-title"
      aria-describedby="confirm-message"
      onCancel={(e) => {
        e.preventDefault();
        finish(false);
      }}
    >
      {o ? (
        <form
          method="dialog"
          onSubmit={(e) => {
            e.preventDefault();
            if (!reasonMissing && !typedMissing) finish(true);
          }}
        >
          <h2 id="confirm-title">{o.title}</h2>
          <div id="confirm-message" class="dialog-message">
            {o.message}
          </div>
          {o.reason ? (
            <div class="field">
              <label for="confirm-reason">
                {o.reason.label}
                {o.reason.required ? <span class="req"> (required)</span> : null}
              </label>
              <textarea id="confirm-reason" rows={2} maxLength={500} value={reason} onInput={(e) => setReason(e.currentTarget.value)} autoFocus />
            </div>
          ) : null}
          {o.typed ? (
            <div class="field">
              <label for="confirm-typed">
                Type <code>{o.typed}</code> to confirm
              </label>
              <input id="confirm-typed" autoComplete="off" spellcheck={false} value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autoFocus={!o.reason} />
            </div>
          ) : null}
          <div class="dialog-actions">
            <button type="button" class="button" onClick={() => finish(false)} autoFocus={!o.reason && !o.typed}>
              Cancel
            </button>
            <button type="submit" class={`button ${o.danger ? 'danger' : 'primary'}`} disabled={reasonMissing || typedMissing}>
              {o.confirmLabel}
            </button>
          </div>
        </form>
      ) : null}
    </dialog>
  );
}

export interface Toast {
  id: number;
  message: string;
  error?: boolean;
  action?: ToastAction;
}

export function Toasts({ toasts, dismiss }: { toasts: Toast[]; dismiss: (id: number) => void }) {
  return (
    <div class="toasts" role="status" aria-live="polite">
      {toasts.map((t) => (
        <div key={t.id} class={`toast${t.error ? ' error' : ''}`}>
          <span>{t.message}</span>
          {t.action ? (
            <button
              type="button"
              class="button small"
              onClick={() => {
                dismiss(t.id);
                void t.action?.run();
              }}
            >
              {t.action.label}
            </button>
          ) : null}
          <button type="button" class="icon-button" aria-label="Dismiss" onClick={() => dismiss(t.id)}>
            ×
          </button>
        </div>
      ))}
    </div>
  );
}
