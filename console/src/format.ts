// Numbers and times as an operator reads them. Times are shown in UTC, labelled as such, because
// memgate's records, logs and history are all in UTC.

const nf = new Intl.NumberFormat('en');

export function count(n: number): string {
  if (Math.abs(n) >= 1e9) return `${(n / 1e9).toFixed(1)}B`;
  if (Math.abs(n) >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (Math.abs(n) >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
  if (Math.abs(n) < 10 && !Number.isInteger(n)) return n.toFixed(1);
  return nf.format(Math.round(n));
}

export function exact(n: number): string {
  return nf.format(n);
}

export function percent(share: number, digits = 1): string {
  if (!Number.isFinite(share)) return '–';
  return `${(share * 100).toFixed(digits)}%`;
}

export function ms(value: number): string {
  if (value >= 100) return `${Math.round(value)} ms`;
  return `${value.toFixed(value >= 10 ? 1 : 2)} ms`;
}

export function ratio(a: number, b: number): number {
  return b ? a / b : 0;
}

/** 2025-06-15 09:00 UTC */
export function time(isoText: string | number | null | undefined): string {
  if (isoText === null || isoText === undefined || isoText === '') return '–';
  const d = new Date(isoText);
  if (Number.isNaN(d.getTime())) return String(isoText);
  if (d.getUTCFullYear() >= 9999) return 'open';
  return `${d.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

/** 09:00 (UTC), for chart axes. */
export function clock(t: number, withDay = false): string {
  const s = new Date(t).toISOString();
  return withDay ? `${s.slice(5, 10)} ${s.slice(11, 16)}` : s.slice(11, 16);
}

function span(secs: number): string {
  if (secs < 60) return `${secs} s`;
  if (secs < 3600) return `${Math.round(secs / 60)} min`;
  if (secs < 86400) return `${Math.round(secs / 3600)} h`;
  return `${Math.round(secs / 86400)} d`;
}

export function ago(isoText: string | number | null): string {
  if (isoText === null || isoText === '') return 'never';
  const secs = Math.round((Date.now() - new Date(isoText).getTime()) / 1000);
  return secs < 0 ? `in ${span(-secs)}` : `${span(secs)} ago`;
}

/** Whether a record may be injected now, as the temporal layer judges it. */
export function validity(from: string, until: string, now = Date.now()): 'now' | 'future' | 'expired' {
  if (Date.parse(from) > now) return 'future';
  if (Date.parse(until) <= now) return 'expired';
  return 'now';
}

/** Every string and number of a record's content, in document order: its words. */
export function words(content: unknown): string[] {
  const out: string[] = [];
  const walk = (v: unknown) => {
    if (typeof v === 'string') out.push(v);
    else if (typeof v === 'number') out.push(String(v));
    else if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object') Object.values(v).forEach(walk);
  };
  walk(content);
  return out;
}

/** A record's words on one line, cut at `max` characters with an ellipsis. */
export function preview(content: unknown, max = 120): string {
  const line = words(content).join(' · ').replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1).trimEnd()}…` : line;
}
