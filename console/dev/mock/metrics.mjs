// The mock's metrics history: per (release, minute) rows with counts and a latency histogram, as
// API.md §3.1 asks of memgate. A day of history is generated at start (a daily wave, a v2 canary
// six to three hours ago, a short embedder outage 45 minutes ago), and live traffic is added every
// two seconds according to the current rollout, so charts move while you watch.

import { random } from './random.mjs';

const BINS = 40;
const LOW_MS = 0.05;
const HIGH_MS = 10_000;
const RATIO = Math.log(HIGH_MS / LOW_MS) / BINS;

const binOf = (ms) => Math.max(0, Math.min(BINS - 1, Math.floor(Math.log(Math.max(ms, LOW_MS) / LOW_MS) / RATIO)));
const binMid = (i) => LOW_MS * Math.exp((i + 0.5) * RATIO);

function emptyRow() {
  return {
    calls: 0,
    errors: { upstream: 0, memory: 0, rate_limited: 0, client: 0 },
    memory: { ok: 0, skipped: 0, degraded: 0 },
    injected_records: 0,
    injected_tokens: 0,
    visible_tokens: 0,
    hist: new Array(BINS).fill(0),
  };
}

function addRow(into, row) {
  into.calls += row.calls;
  for (const k of Object.keys(into.errors)) into.errors[k] += row.errors[k];
  for (const k of Object.keys(into.memory)) into.memory[k] += row.memory[k];
  into.injected_records += row.injected_records;
  into.injected_tokens += row.injected_tokens;
  into.visible_tokens += row.visible_tokens;
  for (let i = 0; i < BINS; i++) into.hist[i] += row.hist[i];
}

function quantile(hist, q) {
  const total = hist.reduce((a, b) => a + b, 0);
  if (!total) return 0;
  const target = q * total;
  let seen = 0;
  for (let i = 0; i < BINS; i++) {
    seen += hist[i];
    if (seen >= target) return Math.round(binMid(i) * 100) / 100;
  }
  return Math.round(binMid(BINS - 1) * 100) / 100;
}

function publicRow(row) {
  return {
    calls: row.calls,
    errors: { ...row.errors },
    memory: { ...row.memory },
    injected_records: row.injected_records,
    injected_tokens: row.injected_tokens,
    visible_tokens: row.visible_tokens,
    added_latency_ms: { p50: quantile(row.hist, 0.5), p99: quantile(row.hist, 0.99) },
  };
}

/** How each release behaves, per call. */
const PROFILE = {
  v1: { upstream: 0.003, memory: 0.001, records: 2.4, tokensPerRecord: 205, visible: 9100, latency: 1.3 },
  v2: { upstream: 0.003, memory: 0.0015, records: 2.9, tokensPerRecord: 215, visible: 9300, latency: 1.6 },
  'v3-exp': { upstream: 0.3, memory: 0.02, records: 4.1, tokensPerRecord: 260, visible: 9300, latency: 2.4 },
};

export class MetricsStore {
  constructor(now, releaseNames, canaryShare, empty = false) {
    this.rows = new Map(); // `${release}|${minuteMs}` -> row
    this.rnd = random(42);
    this.seconds = new Map(); // release -> [{sec, calls, errors}]
    this.releaseNames = releaseNames;
    if (empty) return;
    const startMinute = Math.floor(now / 60_000) * 60_000 - 24 * 3600_000;
    for (let t = startMinute; t < Math.floor(now / 60_000) * 60_000; t += 60_000) {
      const total = this.baseCalls(t);
      let rest = total;
      for (const name of releaseNames) {
        if (name === 'v1') continue;
        const n = Math.round(total * canaryShare(name, t));
        rest -= n;
        if (n) this.simulate(name, t, n, now);
      }
      this.simulate('v1', t, rest, now);
    }
  }

  /** Calls per minute in the whole deployment: a daily wave plus noise. */
  baseCalls(t) {
    const hour = (t / 3600_000) % 24;
    return Math.max(20, Math.round(300 + 150 * Math.sin(((hour - 9) / 24) * 2 * Math.PI) + (this.rnd() - 0.5) * 60));
  }

  row(release, minute) {
    const key = `${release}|${minute}`;
    let row = this.rows.get(key);
    if (!row) {
      row = emptyRow();
      this.rows.set(key, row);
    }
    return row;
  }

  /** Adds `n` calls of `release` at time `t`; returns how many errors (upstream + memory). */
  simulate(release, t, n, now) {
    const p = PROFILE[release] ?? PROFILE.v1;
    const row = this.row(release, Math.floor(t / 60_000) * 60_000);
    const outage = t >= now - 45 * 60_000 && t < now - 41 * 60_000;
    let errors = 0;
    for (let i = 0; i < n; i++) {
      const r = this.rnd();
      row.calls += 1;
      let status = 'ok';
      if (r < 0.07) status = 'skipped';
      else if (r < (outage ? 0.42 : 0.085)) status = 'degraded';
      row.memory[status] += 1;
      const upstream = this.rnd() < p.upstream;
      const memory = status === 'degraded' && (outage || this.rnd() < p.memory * 10);
      if (upstream) row.errors.upstream += 1;
      if (memory) row.errors.memory += 1;
      if (upstream || memory) errors += 1;
      if (this.rnd() < 0.0006) row.errors.rate_limited += 1;
      if (this.rnd() < 0.005) row.errors.client += 1;
      if (status === 'ok') {
        const records = Math.max(0, Math.round(p.records + (this.rnd() - 0.5) * 3));
        row.injected_records += records;
        row.injected_tokens += Math.round(records * p.tokensPerRecord * (0.7 + this.rnd() * 0.6));
        row.visible_tokens += Math.round(p.visible * (0.6 + this.rnd() * 0.8));
      }
      // Log-normal added latency around the profile's median; the outage is slow too.
      const z = Math.sqrt(-2 * Math.log(this.rnd() + 1e-12)) * Math.cos(2 * Math.PI * this.rnd());
      const ms = (outage ? 9 : p.latency) * Math.exp(0.45 * z);
      row.hist[binOf(ms)] += 1;
    }
    return errors;
  }

  /** Live traffic for one tick: `share(name)` is each non-active release's share of calls. */
  tick(now, seconds, share, active) {
    const minute = Math.floor(now / 60_000) * 60_000;
    const total = Math.round((this.baseCalls(minute) / 60) * seconds * (0.8 + this.rnd() * 0.4));
    let rest = total;
    const sec = Math.floor(now / 1000);
    const result = {};
    for (const name of this.releaseNames) {
      if (name === active) continue;
      const n = Math.round(total * share(name));
      rest -= n;
      if (n > 0) result[name] = { n, errors: this.simulate(name, now, n, now) };
    }
    result[active] = { n: rest, errors: this.simulate(active, now, rest, now) };
    for (const [name, { n, errors }] of Object.entries(result)) {
      const list = this.seconds.get(name) ?? [];
      list.push({ sec, calls: n, errors });
      while (list.length && list[0].sec < sec - 3600) list.shift();
      this.seconds.set(name, list);
    }
    return result;
  }

  /** (calls, errors) of `release` over the last `secs` seconds of live traffic. */
  window(release, now, secs) {
    const from = Math.floor(now / 1000) - secs;
    return (this.seconds.get(release) ?? []).filter((s) => s.sec > from).reduce((a, s) => ({ calls: a.calls + s.calls, errors: a.errors + s.errors }), { calls: 0, errors: 0 });
  }

  resetWindow(release) {
    this.seconds.set(release, []);
  }

  /** API.md §3.1. */
  history(now, window, release) {
    const bucketSecs = window === '24h' ? 300 : 60;
    const count = window === '24h' ? 288 : 60;
    const step = bucketSecs * 1000;
    const end = Math.floor(now / step) * step + step;
    const from = end - count * step;
    const names = release ? [release] : this.releaseNames;
    const buckets = [];
    const totals = emptyRow();
    for (let b = from; b < end; b += step) {
      const row = emptyRow();
      for (let m = b; m < b + step; m += 60_000) {
        for (const name of names) {
          const r = this.rows.get(`${name}|${m}`);
          if (r) addRow(row, r);
        }
      }
      addRow(totals, row);
      buckets.push({ t: iso(b), ...publicRow(row) });
    }
    return { window, bucket_secs: bucketSecs, release: release ?? null, from: iso(from), to: iso(end), buckets, totals: publicRow(totals) };
  }

  /** API.md §3.2. */
  releases(now, window) {
    const hist = (name) => this.history(now, window, name).totals;
    const per = this.releaseNames.map((name) => ({ name, t: hist(name) }));
    const all = per.reduce((a, p) => a + p.t.calls, 0);
    return {
      window,
      data: per
        .sort((a, b) => (a.name < b.name ? -1 : 1))
        .map(({ name, t }) => {
          const ratio = (a, b) => (b ? a / b : 0);
          const saved = Math.max(0, t.visible_tokens - t.injected_tokens);
          return {
            release: name,
            calls: t.calls,
            share: round(ratio(t.calls, all), 4),
            errors: t.errors,
            error_rate: round(ratio(t.errors.upstream + t.errors.memory, t.calls), 4),
            memory: t.memory,
            injected_records: t.injected_records,
            injected_tokens: t.injected_tokens,
            injected_tokens_per_call: round(ratio(t.injected_tokens, t.calls), 1),
            visible_tokens: t.visible_tokens,
            saved_tokens: saved,
            saved_share: round(ratio(saved, t.visible_tokens), 4),
            added_latency_ms: t.added_latency_ms,
          };
        }),
    };
  }
}

const round = (x, d) => Math.round(x * 10 ** d) / 10 ** d;
const iso = (ms) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
