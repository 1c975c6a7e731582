// A form generated from a record type's JSON Schema (the subset memgate's schemas use: objects,
// open maps, arrays, enums, strings with formats, numbers, booleans, and union scalar types).
// Every field's id is derived from its JSON path (`$.content.contact.email`), so a 422 problem
// from memgate is shown at the field it names and the error summary can link to it. memgate stays
// the judge: the form only helps to write valid content.

import type { Problem } from '../api';
import type { JsonSchema } from '../types';

type Json = unknown;

export function fieldId(path: string): string {
  return `f-${path.replace(/[^A-Za-z0-9_-]+/g, '-')}`;
}

/** Drops empty strings, empty arrays and empty objects, so untouched optional fields stay out. */
export function prune(value: Json): Json {
  if (typeof value === 'string') return value === '' ? undefined : value;
  if (Array.isArray(value)) {
    const items = value.map(prune).filter((v) => v !== undefined);
    return items.length ? items : undefined;
  }
  if (value && typeof value === 'object') {
    const out: Record<string, Json> = {};
    for (const [k, v] of Object.entries(value)) {
      const p = prune(v);
      if (p !== undefined) out[k] = p;
    }
    return Object.keys(out).length ? out : undefined;
  }
  return value;
}

/** Every path the form draws a field for, to tell which problems it can show in place. */
export function fieldPaths(schema: JsonSchema, value: Json, path: string, out = new Set<string>()): Set<string> {
  out.add(path);
  const kind = kindOf(schema);
  if (kind === 'object' && schema.properties) {
    const obj = (value ?? {}) as Record<string, Json>;
    for (const [k, s] of Object.entries(schema.properties)) fieldPaths(s, obj[k], childPath(path, k), out);
    if (typeof schema.additionalProperties === 'object') for (const k of Object.keys(obj)) if (!(k in schema.properties)) out.add(childPath(path, k));
  } else if (kind === 'map') {
    for (const k of Object.keys((value ?? {}) as object)) out.add(childPath(path, k));
  } else if (kind === 'array' && Array.isArray(value) && schema.items) {
    value.forEach((v, i) => fieldPaths(schema.items as JsonSchema, v, `${path}[${i}]`, out));
  }
  return out;
}

export function childPath(path: string, key: string): string {
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

type Kind = 'enum' | 'string' | 'number' | 'integer' | 'boolean' | 'scalar' | 'object' | 'map' | 'array' | 'json';

function kindOf(schema: JsonSchema): Kind {
  if (schema.enum) return 'enum';
  const t = schema.type;
  if (Array.isArray(t)) return t.every((x) => ['string', 'number', 'integer', 'boolean'].includes(x)) ? 'scalar' : 'json';
  if (t === 'object') return schema.properties ? 'object' : typeof schema.additionalProperties === 'object' ? 'map' : 'json';
  if (t === 'array') return schema.items ? 'array' : 'json';
  if (t === 'string' || t === 'number' || t === 'integer' || t === 'boolean') return t;
  return 'json';
}

function label(name: string): string {
  return name.replace(/_/g, ' ');
}

interface FieldProps {
  schema: JsonSchema;
  value: Json;
  onChange: (v: Json) => void;
  path: string;
  name: string;
  required?: boolean;
  problems: Map<string, Problem[]>;
  disabled?: boolean;
}

function Problems({ path, problems }: { path: string; problems: Map<string, Problem[]> }) {
  const list = problems.get(path);
  if (!list?.length) return null;
  return (
    <ul class="field-problems" id={`${fieldId(path)}-problems`}>
      {list.map((p) => (
        <li key={p.message}>{p.message}</li>
      ))}
    </ul>
  );
}

function hints(schema: JsonSchema): string {
  const parts: string[] = [];
  if (schema.description) parts.push(schema.description);
  if (schema.format) parts.push(`format: ${schema.format}${schema.format === 'date' ? ' (YYYY-MM-DD)' : schema.format === 'date-time' ? ' (e.g. 2025-06-15T09:00:00Z)' : ''}`);
  if (schema.pattern) parts.push(`pattern ${schema.pattern}`);
  if (schema.maxLength !== undefined) parts.push(`at most ${schema.maxLength} characters`);
  if (schema.minimum !== undefined || schema.maximum !== undefined) parts.push(`${schema.minimum ?? '…'} to ${schema.maximum ?? '…'}`);
  if (schema.maxItems !== undefined) parts.push(`at most ${schema.maxItems} items`);
  return parts.join(' · ');
}

function scalarFromText(text: string, types: string[]): Json {
  if (text === '') return '';
  if (types.includes('boolean') && (text === 'true' || text === 'false')) return text === 'true';
  if ((types.includes('number') || types.includes('integer')) && /^-?\d+(\.\d+)?$/.test(text)) return Number(text);
  return text;
}

export function Field({ schema, value, onChange, path, name, required, problems, disabled }: FieldProps) {
  const id = fieldId(path);
  const kind = kindOf(schema);
  const hint = hints(schema);
  const has = problems.has(path);
  const describedBy = [hint ? `${id}-hint` : '', has ? `${id}-problems` : ''].filter(Boolean).join(' ') || undefined;
  const common = { id, 'aria-invalid': has ? ('true' as const) : undefined, 'aria-describedby': describedBy, 'data-path': path, disabled };
  const head = (
    <label for={id}>
      {label(name)}
      {required ? <span class="req" aria-label="required"> *</span> : null}
    </label>
  );
  const tail = (
    <>
      {hint ? (
        <div class="hint" id={`${id}-hint`}>
          {hint}
        </div>
      ) : null}
      <Problems path={path} problems={problems} />
    </>
  );

  if (kind === 'object') {
    const obj = (value && typeof value === 'object' ? value : {}) as Record<string, Json>;
    return (
      <fieldset class={`group${has ? ' invalid' : ''}`} id={id} data-path={path} tabIndex={-1}>
        <legend>
          {label(name)}
          {required ? <span class="req" aria-label="required"> *</span> : null}
        </legend>
        {schema.description ? <div class="hint">{schema.description}</div> : null}
        <Problems path={path} problems={problems} />
        {Object.entries(schema.properties ?? {}).map(([k, s]) => (
          <Field
            key={k}
            schema={s}
            value={obj[k]}
            name={k}
            path={childPath(path, k)}
            required={schema.required?.includes(k)}
            problems={problems}
            disabled={disabled}
            onChange={(v) => onChange({ ...obj, [k]: v })}
          />
        ))}
      </fieldset>
    );
  }

  if (kind === 'map') {
    const entries = Object.entries((value && typeof value === 'object' ? value : {}) as Record<string, Json>);
    const valueSchema = schema.additionalProperties as JsonSchema;
    const set = (list: [string, Json][]) => onChange(Object.fromEntries(list));
    return (
      <fieldset class={`group${has ? ' invalid' : ''}`} id={id} data-path={path} tabIndex={-1}>
        <legend>{label(name)}</legend>
        {schema.description ? <div class="hint">{schema.description}</div> : null}
        <Problems path={path} problems={problems} />
        {entries.map(([k, v], i) => {
          const p = childPath(path, k);
          return (
            <div class="map-row" key={i}>
              <label class="sr-only" for={`${id}-k${i}`}>
                {label(name)} name {i + 1}
              </label>
              <input id={`${id}-k${i}`} value={k} placeholder="name" disabled={disabled} onInput={(e) => set(entries.map((x, j) => (j === i ? [e.currentTarget.value, x[1]] : x)))} />
              <label class="sr-only" for={fieldId(p)}>
                value of {k || `name ${i + 1}`}
              </label>
              <input
                id={fieldId(p)}
                data-path={p}
                aria-invalid={problems.has(p) ? 'true' : undefined}
                value={v === undefined ? '' : String(v)}
                placeholder="value"
                disabled={disabled}
                onInput={(e) => set(entries.map((x, j) => (j === i ? [x[0], scalarFromText(e.currentTarget.value, [valueSchema.type ?? 'string'].flat())] : x)))}
              />
              <button type="button" class="button small" disabled={disabled} onClick={() => set(entries.filter((_, j) => j !== i))} aria-label={`Remove ${k || `entry ${i + 1}`}`}>
                Remove
              </button>
              <Problems path={p} problems={problems} />
            </div>
          );
        })}
        <button type="button" class="button small" disabled={disabled} onClick={() => set([...entries, ['', '']])}>
          Add {label(name)} entry
        </button>
      </fieldset>
    );
  }

  if (kind === 'array') {
    const items = Array.isArray(value) ? value : [];
    const itemSchema = schema.items as JsonSchema;
    const full = schema.maxItems !== undefined && items.length >= schema.maxItems;
    return (
      <fieldset class={`group${has ? ' invalid' : ''}`} id={id} data-path={path} tabIndex={-1}>
        <legend>
          {label(name)}
          {required ? <span class="req" aria-label="required"> *</span> : null}
        </legend>
        {hint ? <div class="hint">{hint}</div> : null}
        <Problems path={path} problems={problems} />
        {items.map((item, i) => (
          <div class="array-item" key={i}>
            <Field
              schema={itemSchema}
              value={item}
              name={`${name.replace(/s$/, '')} ${i + 1}`}
              path={`${path}[${i}]`}
              problems={problems}
              disabled={disabled}
              onChange={(v) => onChange(items.map((x, j) => (j === i ? v : x)))}
            />
            <button type="button" class="button small" disabled={disabled} onClick={() => onChange(items.filter((_, j) => j !== i))} aria-label={`Remove ${label(name)} item ${i + 1}`}>
              Remove
            </button>
          </div>
        ))}
        <button type="button" class="button small" disabled={disabled || full} onClick={() => onChange([...items, kindOf(itemSchema) === 'object' ? {} : itemSchema.type === 'boolean' ? false : ''])}>
          Add {label(name)} item
        </button>
      </fieldset>
    );
  }

  if (kind === 'enum') {
    const options = schema.enum ?? [];
    const at = options.findIndex((o) => JSON.stringify(o) === JSON.stringify(value));
    return (
      <div class="field">
        {head}
        <select {...common} value={at < 0 ? '' : String(at)} onChange={(e) => onChange(e.currentTarget.value === '' ? undefined : options[Number(e.currentTarget.value)])}>
          <option value="">{required ? '— choose —' : '— none —'}</option>
          {options.map((o, i) => (
            <option key={i} value={String(i)}>
              {String(o)}
            </option>
          ))}
        </select>
        {tail}
      </div>
    );
  }

  if (kind === 'boolean') {
    return (
      <div class="field checkbox">
        <input type="checkbox" {...common} checked={value === true} onChange={(e) => onChange(e.currentTarget.checked)} />
        {head}
        {tail}
      </div>
    );
  }

  if (kind === 'number' || kind === 'integer') {
    return (
      <div class="field">
        {head}
        <input
          type="number"
          inputMode={kind === 'integer' ? 'numeric' : 'decimal'}
          step={kind === 'integer' ? 1 : 'any'}
          min={schema.minimum}
          max={schema.maximum}
          {...common}
          value={value === undefined || value === null ? '' : String(value)}
          onInput={(e) => {
            const t = e.currentTarget.value;
            onChange(t === '' ? undefined : Number(t));
          }}
        />
        {tail}
      </div>
    );
  }

  if (kind === 'string' || kind === 'scalar') {
    const text = value === undefined || value === null ? '' : String(value);
    const long = kind === 'string' && (schema.maxLength ?? 0) > 300;
    const type = schema.format === 'date' ? 'date' : schema.format === 'email' ? 'email' : 'text';
    const parse = (t: string) => (kind === 'scalar' ? scalarFromText(t, [schema.type ?? 'string'].flat()) : t);
    return (
      <div class="field">
        {head}
        {long ? (
          <textarea {...common} rows={Math.min(8, Math.max(2, text.split('\n').length))} maxLength={schema.maxLength} value={text} onInput={(e) => onChange(parse(e.currentTarget.value))} />
        ) : (
          <input type={type as 'text'} {...common} maxLength={schema.maxLength} value={text} onInput={(e) => onChange(parse(e.currentTarget.value))} />
        )}
        {tail}
      </div>
    );
  }

  return <JsonField {...{ schema, value, onChange, path, name, required, problems, disabled }} />;
}

/** Anything the form does not draw: edited as JSON text. */
function JsonField({ value, onChange, path, name, problems, disabled }: FieldProps) {
  const id = fieldId(path);
  return (
    <div class="field">
      <label for={id}>{label(name)} (JSON)</label>
      <textarea
        id={id}
        data-path={path}
        class="mono"
        rows={4}
        disabled={disabled}
        value={value === undefined ? '' : JSON.stringify(value, null, 2)}
        onChange={(e) => {
          try {
            onChange(e.currentTarget.value.trim() ? JSON.parse(e.currentTarget.value) : undefined);
          } catch {
            /* keep the text until it parses; memgate will say what is wrong */
          }
        }}
      />
      <Problems path={path} problems={problems} />
    </div>
  );
}
