// Hand-made SVG time-series charts: lines or stacked areas over time buckets, an optional bound
// (the guard's error rate), a cursor that follows the mouse or the arrow keys and reads the
// bucket's values out, and the same data as a table for screen readers and copying.
// No charting library: a few hundred lines cover what the console draws, and SVG is
// accessible and needs no inline style (CSP).

import { useLayoutEffect, useMemo, useRef, useState } from 'preact/hooks';
import { clock } from '../format';

export interface Series {
  name: string;
  values: (number | null)[];
  /** A CSS class giving the stroke/fill colour: s1..s6. */
  tone: string;
  dashed?: boolean;
}

export interface ChartProps {
  title: string;
  times: number[];
  series: Series[];
  format: (v: number) => string;
  stacked?: boolean;
  bound?: { value: number; label: string };
  height?: number;
  /** Lowest upper end of the y axis (e.g. 1% for error rates). */
  minMax?: number;
  description?: string;
  /** The last bucket is still filling (the current minute): drawn faint, left out of "latest". */
  partial?: boolean;
}

const M = { left: 52, right: 10, top: 10, bottom: 22 };

/** The buckets with a value whose neighbours have none: no line segment reaches them. */
export function isolated(values: (number | null)[]): number[] {
  const has = (i: number) => i >= 0 && i < values.length && values[i] !== null && Number.isFinite(values[i]);
  return values.flatMap((_, i) => (has(i) && !has(i - 1) && !has(i + 1) ? [i] : []));
}

function niceCeil(v: number): number {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

export function Chart({ title, times, series, format, stacked, bound, height = 170, minMax = 0, description, partial }: ChartProps) {
  const [cursor, setCursor] = useState<number | null>(null);
  const [table, setTable] = useState(false);
  const box = useRef<SVGSVGElement>(null);
  const plot = useRef<HTMLDivElement>(null);
  // Drawn at the plot's real width, so text and lines keep their size on any screen.
  const [W, setW] = useState(560);
  useLayoutEffect(() => {
    const el = plot.current;
    if (!el || typeof ResizeObserver === 'undefined') return undefined;
    const ro = new ResizeObserver(([entry]) => {
      const w = Math.round(entry.contentRect.width);
      if (w > 0) setW(w);
    });
    ro.observe(el);
    return () => ro.disconnect();
  }, []);
  const id = useRef(`chart-${Math.random().toString(36).slice(2)}`).current;
  const n = times.length;
  const H = height;
  const plotW = W - M.left - M.right;
  const plotH = H - M.top - M.bottom;

  const layers = useMemo(() => {
    if (!stacked) return series.map((s) => ({ s, low: s.values.map(() => 0), high: s.values.map((v) => v ?? 0) }));
    let base = times.map(() => 0);
    return series.map((s) => {
      const low = base;
      const high = base.map((b, i) => b + (s.values[i] ?? 0));
      base = high;
      return { s, low, high };
    });
  }, [series, stacked, times]);

  const top = niceCeil(Math.max(minMax, bound ? bound.value * 1.15 : 0, ...layers.flatMap((l) => l.high.filter(Number.isFinite))));
  const x = (i: number) => M.left + (n <= 1 ? plotW / 2 : (i / (n - 1)) * plotW);
  const y = (v: number) => M.top + plotH - (Math.min(v, top) / top) * plotH;
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => f * top);
  const spanDays = n > 1 && times[n - 1] - times[0] > 6 * 3600_000;
  const labelEvery = Math.max(1, Math.ceil(n / Math.max(2, Math.floor(plotW / (spanDays ? 90 : 64)))));

  const linePath = (all: (number | null)[]) => {
    const values = partial ? all.slice(0, -1) : all;
    let d = '';
    let pen = false;
    values.forEach((v, i) => {
      if (v === null || !Number.isFinite(v)) {
        pen = false;
        return;
      }
      d += `${pen ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    });
    return d;
  };
  const areaPath = (low: number[], high: number[]) => {
    if (!n) return '';
    const upper = high.map((v, i) => `${i ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join('');
    const lower = low
      .map((v, i) => [i, v] as const)
      .reverse()
      .map(([i, v]) => `L${x(i).toFixed(1)},${y(v).toFixed(1)}`)
      .join('');
    return `${upper}${lower}Z`;
  };

  const pick = (clientX: number) => {
    const rect = box.current?.getBoundingClientRect();
    if (!rect || n === 0) return;
    const px = ((clientX - rect.left) / rect.width) * W;
    const i = Math.round(((px - M.left) / plotW) * (n - 1));
    setCursor(Math.max(0, Math.min(n - 1, i)));
  };
  const onKey = (e: KeyboardEvent) => {
    if (!n) return;
    const step = e.shiftKey ? 10 : 1;
    const at = cursor ?? n - 1;
    const next = { ArrowLeft: at - step, ArrowRight: at + step, Home: 0, End: n - 1 }[e.key];
    if (next !== undefined) {
      e.preventDefault();
      setCursor(Math.max(0, Math.min(n - 1, next)));
    } else if (e.key === 'Escape') setCursor(null);
  };

  const last = partial && n > 1 ? n - 2 : n - 1;
  const latest = n ? series.map((s) => `${s.name} ${s.values[last] === null ? '–' : format(s.values[last] ?? 0)}`).join(', ') : 'no data';
  const readout =
    cursor === null
      ? n
        ? `Latest (${clock(times[last], spanDays)} UTC): ${latest}`
        : 'No data'
      : `${clock(times[cursor], spanDays)} UTC: ${series.map((s) => `${s.name} ${s.values[cursor] === null ? '–' : format(s.values[cursor] ?? 0)}`).join(', ')}`;
  const drawn = series.some((s) => s.values.some((v) => v !== null && v !== 0));

  return (
    <figure class="chart" data-chart={title} data-drawn={drawn ? 'yes' : 'no'}>
      <figcaption id={`${id}-title`}>
        <span class="chart-title">{title}</span>
        <span class="legend" aria-hidden="true">
          {series.map((s) => (
            <span key={s.name} class="legend-item">
              <svg width="18" height="8" class={s.tone}>
                <line x1="0" y1="4" x2="18" y2="4" class={`stroke${s.dashed ? ' dashed' : ''}`} />
              </svg>
              {s.name}
            </span>
          ))}
          {bound ? (
            <span class="legend-item">
              <svg width="18" height="8" class="bound">
                <line x1="0" y1="4" x2="18" y2="4" class="stroke dashed" />
              </svg>
              {bound.label}
            </span>
          ) : null}
        </span>
      </figcaption>
      <div class="chart-readout" id={`${id}-readout`} aria-live="polite">
        {readout}
      </div>
      <div
        class="chart-plot"
        ref={plot}
        tabIndex={0}
        role="group"
        aria-labelledby={`${id}-title`}
        aria-describedby={`${id}-readout${description ? ` ${id}-desc` : ''}`}
        onKeyDown={onKey}
        onBlur={() => setCursor(null)}
      >
        <svg ref={box} viewBox={`0 0 ${W} ${H}`} width={W} height={H} role="img" aria-label={`${title}. ${readout}`} onMouseMove={(e) => pick(e.clientX)} onMouseLeave={() => setCursor(null)}>
          {!drawn ? (
            <text class="empty" x={M.left + plotW / 2} y={M.top + plotH / 2} text-anchor="middle">
              No data in this window
            </text>
          ) : null}
          {(drawn ? ticks : [0]).map((t) => (
            <g key={t} class="grid">
              <line x1={M.left} x2={W - M.right} y1={y(t)} y2={y(t)} />
              <text x={M.left - 6} y={y(t) + 4} text-anchor="end">
                {format(t)}
              </text>
            </g>
          ))}
          {times.map((t, i) =>
            i % labelEvery === 0 ? (
              <text key={t} class="axis" x={x(i)} y={H - 6} text-anchor={i === 0 ? 'start' : 'middle'}>
                {clock(t, spanDays && i === 0)}
              </text>
            ) : null,
          )}
          {stacked
            ? layers.map(({ s, low, high }) => <path key={s.name} class={`${s.tone} area`} d={areaPath(low, high)} data-series={s.name} />)
            : null}
          {layers.map(({ s, high }) => (
            <path key={s.name} class={`${s.tone} stroke${s.dashed ? ' dashed' : ''}`} d={linePath(stacked ? high : s.values)} data-series={s.name} />
          ))}
          {stacked
            ? null
            : series.flatMap((s) =>
                // A bucket with a value between two without (one busy minute in a quiet hour) is
                // a point no line reaches: drawn as a dot, so the chart shows every bucket the
                // totals beside it count, the still-filling one too (faint).
                isolated(s.values).map((i) => (
                  <circle key={`${s.name}-${i}`} class={`${s.tone} point${partial && i === n - 1 ? ' partial' : ''}`} cx={x(i)} cy={y(s.values[i] ?? 0)} r="3" data-point={s.name} />
                )),
              )}
          {partial && n > 1
            ? layers.map(({ s, high }) => {
                const a = stacked ? high[n - 2] : s.values[n - 2];
                const b = stacked ? high[n - 1] : s.values[n - 1];
                return a === null || b === null ? null : (
                  <path key={`${s.name}-partial`} class={`${s.tone} stroke partial`} d={`M${x(n - 2).toFixed(1)},${y(a ?? 0).toFixed(1)}L${x(n - 1).toFixed(1)},${y(b ?? 0).toFixed(1)}`} data-partial={s.name} />
                );
              })
            : null}
          {bound ? (
            <g class="bound">
              <line class="stroke dashed" x1={M.left} x2={W - M.right} y1={y(bound.value)} y2={y(bound.value)} />
              <text x={W - M.right - 4} y={y(bound.value) - 4} text-anchor="end">
                {bound.label}
              </text>
            </g>
          ) : null}
          {cursor !== null ? (
            <g class="cursor">
              <line x1={x(cursor)} x2={x(cursor)} y1={M.top} y2={M.top + plotH} />
              {layers.map(({ s, high }) =>
                s.values[cursor] === null ? null : <circle key={s.name} class={s.tone} cx={x(cursor)} cy={y(stacked ? high[cursor] : (s.values[cursor] ?? 0))} r="3.5" />,
              )}
            </g>
          ) : null}
        </svg>
      </div>
      {description ? (
        <p class="chart-desc" id={`${id}-desc`}>
          {description}
        </p>
      ) : null}
      <details class="chart-table" onToggle={(e) => setTable((e.currentTarget as HTMLDetailsElement).open)}>
        <summary>Data as a table</summary>
        {table ? (
          <div class="table-scroll">
            <table>
              <caption class="sr-only">{title}</caption>
              <thead>
                <tr>
                  <th scope="col">Time (UTC)</th>
                  {series.map((s) => (
                    <th key={s.name} scope="col">
                      {s.name}
                    </th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {times.map((t, i) => (
                  <tr key={t}>
                    <th scope="row">{clock(t, spanDays)}</th>
                    {series.map((s) => (
                      <td key={s.name}>{s.values[i] === null ? '–' : format(s.values[i] ?? 0)}</td>
                    ))}
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ) : null}
      </details>
    </figure>
  );
}
