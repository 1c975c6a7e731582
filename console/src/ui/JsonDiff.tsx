// A side-by-side diff of two JSON documents (a record before and after one change), field by
// field: each leaf is a row with its path, the old value and the new one.

import { useState } from 'preact/hooks';

function flatten(value: unknown, path: string, out: Map<string, string>): Map<string, string> {
  if (Array.isArray(value)) {
    if (!value.length) out.set(path, '[]');
    value.forEach((v, i) => flatten(v, `${path}[${i}]`, out));
  } else if (value && typeof value === 'object') {
    const entries = Object.entries(value);
    if (!entries.length) out.set(path, '{}');
    for (const [k, v] of entries) flatten(v, path ? `${path}.${k}` : k, out);
  } else if (value !== undefined) {
    out.set(path, JSON.stringify(value));
  }
  return out;
}

export function JsonDiff({ before, after, caption }: { before: unknown; after: unknown; caption: string }) {
  const [all, setAll] = useState(false);
  const a = flatten(before ?? {}, '', new Map());
  const b = flatten(after ?? {}, '', new Map());
  const paths = [...new Set([...a.keys(), ...b.keys()])].sort();
  const changed = paths.filter((p) => a.get(p) !== b.get(p));
  const rows = all ? paths : changed;
  return (
    <div class="diff">
      <div class="diff-head">
        <span>
          {changed.length} field{changed.length === 1 ? '' : 's'} changed
        </span>
        <label class="inline">
          <input type="checkbox" checked={all} onChange={(e) => setAll(e.currentTarget.checked)} /> show unchanged fields
        </label>
      </div>
      <div class="table-scroll">
        <table class="diff-table">
          <caption class="sr-only">{caption}</caption>
          <thead>
            <tr>
              <th scope="col">Field</th>
              <th scope="col">Before</th>
              <th scope="col">After</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((p) => {
              const old = a.get(p);
              const neu = b.get(p);
              const kind = old === neu ? 'same' : old === undefined ? 'added' : neu === undefined ? 'removed' : 'changed';
              return (
                <tr key={p} class={kind}>
                  <th scope="row">
                    <code>{p}</code>
                    {kind !== 'same' ? <span class="sr-only"> ({kind})</span> : null}
                  </th>
                  <td class="old">{old === undefined ? <span class="muted">—</span> : <code>{old}</code>}</td>
                  <td class="new">{neu === undefined ? <span class="muted">—</span> : <code>{neu}</code>}</td>
                </tr>
              );
            })}
            {!rows.length ? (
              <tr>
                <td colSpan={3} class="muted">
                  No field changed (a status change or a repeat).
                </td>
              </tr>
            ) : null}
          </tbody>
        </table>
      </div>
    </div>
  );
}
