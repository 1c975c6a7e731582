"""Turns the results of `bench.py` into docs/benchmarks-load.md and its plots.

`full` and `soak` results (loadtest/results/{full,soak}/results.json) go to docs/; a `quick` run
writes the same page into its own results folder, so that development runs never touch docs/.
The added latency of a run is its percentile minus the same percentile of the direct run of the
same group at the same rate (measured minutes apart, on the same mock).
"""

import json
import os
import subprocess

# A rate is "sustained" when at most 0.1% of the scheduled requests failed (non-2xx, transport,
# skipped or unfinished) and p99 stayed under 500 ms: an open-loop queue that grows for 20 s
# shows p99 in seconds, and timeouts.
SUSTAINED_ERROR_SHARE = 0.001
SUSTAINED_P99_MS = 500

TITLES = {
    "direct": "direct to the mock (floor)",
    "nginx": "nginx proxy_pass",
    "litellm": "LiteLLM proxy",
    "memgate-pass": "memgate pass-through",
    "funnel-warm": "memgate funnel, warm queries",
    "funnel-new": "memgate funnel, every query new",
    "funnel-big": "memgate funnel, warm, big tenant",
    "direct-stream": "direct to the mock (floor)",
    "nginx-stream": "nginx proxy_pass",
    "memgate-pass-stream": "memgate pass-through",
    "funnel-warm-stream": "memgate funnel, warm queries",
}


def load(repo, mode):
    path = os.path.join(repo, "loadtest", "results", mode, "results.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def floor_of(results, run):
    want = "direct-stream" if run["system"].endswith("-stream") else "direct"
    for other in results["runs"]:
        if other["group"] == run["group"] and other["rate"] == run["rate"] and other["system"] == want:
            return other
    return None


def added(results, run, metric="latency_ms", q="p99"):
    floor = floor_of(results, run)
    if floor is None or metric not in run or metric not in floor:
        return None
    return run[metric][q] - floor[metric][q]


def error_share(run):
    return run["errors"] / run["scheduled"] if run["scheduled"] else 1.0


def sustained(run):
    return error_share(run) <= SUSTAINED_ERROR_SHARE and run["latency_ms"]["p99"] <= SUSTAINED_P99_MS \
        and run["count"] > 0


def find(results, system, rate=None, group=None):
    for run in results["runs"] if results else []:
        if run["system"] == system and (rate is None or run["rate"] == rate) and (group is None or run["group"] == group):
            return run
    return None


def highest_sustained(results, system):
    rates = [r["rate"] for r in results["runs"] if r["system"] == system and sustained(r)]
    return max(rates) if rates else None


def ms(value, digits=2):
    if value is None:
        return "—"
    return f"{value:+.{digits}f}" if isinstance(value, float) else str(value)


def plain(value, digits=2):
    return "—" if value is None else f"{value:.{digits}f}"


def memory_column(run):
    statuses = run.get("header_counts", {}).get("x-memory-status")
    if not statuses:
        return ""
    total = sum(statuses.values())
    parts = [f"{k} {v / total:.0%}" for k, v in sorted(statuses.items(), key=lambda kv: -kv[1]) if v]
    injected = run.get("header_counts", {}).get("x-memory-injected", {})
    n = sum(injected.values())
    mean = sum(int(k) * v for k, v in injected.items() if k.isdigit()) / n if n else 0
    return ", ".join(parts) + (f"; {mean:.1f} injected" if mean else "")


def errors_column(run):
    if not run["errors"]:
        return "0"
    kinds = {k: v for k, v in run["errors_by_kind"].items() if v}
    statuses = run.get("error_statuses") or {}
    detail = ", ".join(f"{k} {v}" for k, v in kinds.items())
    if statuses:
        detail += "; " + ", ".join(f"{k}×{v}" for k, v in statuses.items())
    return f"{run['errors']} ({error_share(run):.1%}: {detail})"


def judge_soak(run, samples, settings):
    """Pass when no request failed and memory was flat: the largest RSS of the last minute is
    at most 5% (and at most 32 MB) above the largest RSS of the second minute (the first is
    warm-up: pools and caches fill). The slope over the whole run is reported too."""
    failed = run["errors"]
    rows = [(t, rss) for t, rss, *_ in samples]
    duration = rows[-1][0] if rows else 0
    base = [rss for t, rss in rows if 60 <= t < 120] or [rss for t, rss in rows[: max(1, len(rows) // 5)]]
    last = [rss for t, rss in rows if t >= duration - 60] or [rows[-1][1]] if rows else []
    base_mb, last_mb = (max(base) if base else 0), (max(last) if last else 0)
    growth = last_mb - base_mb
    flat = growth <= max(0.0, min(0.05 * base_mb, 32.0)) if base_mb else False
    slope = 0.0
    if len(rows) > 2:
        n = len(rows)
        mt = sum(t for t, _ in rows) / n
        mr = sum(r for _, r in rows) / n
        den = sum((t - mt) ** 2 for t, _ in rows)
        slope = sum((t - mt) * (r - mr) for t, r in rows) / den * 60 if den else 0.0
    windows = run.get("windows", [])
    worst = max((w["p99_ms"] for w in windows), default=0)
    verdict = {
        "pass": failed == 0 and flat,
        "failed_requests": failed,
        "requests": run["scheduled"],
        "rss_start_mb": rows[0][1] if rows else None,
        "rss_base_mb": base_mb,
        "rss_last_minute_max_mb": last_mb,
        "rss_growth_mb": round(growth, 1),
        "rss_slope_mb_per_min": round(slope, 2),
        "flat": flat,
        "worst_window_p99_ms": worst,
        "samples": len(rows),
        "seconds": settings["soak_seconds"],
        "rate": settings["soak_rate"],
    }
    verdict["summary"] = (f"{failed} failed of {run['scheduled']}; RSS {base_mb:.0f} → {last_mb:.0f} MB "
                          f"({growth:+.1f} MB, slope {slope:+.2f} MB/min); worst 10-s p99 {worst:.1f} ms")
    return verdict


def machine_line(results):
    m = results["machine"]
    return (f"{m['nproc']} cores ({m['cpu_model']}), {m['memory']}, Linux {m['kernel']}; memgate "
            f"{m['commit']}; load average at start {m['loadavg_start'][0]:.2f} / {m['loadavg_start'][1]:.2f} / "
            f"{m['loadavg_start'][2]:.2f}")


def other_cpu(results, groups=None):
    values = [r["cpu"]["other"] for r in results["runs"] if "cpu" in r and (groups is None or r["group"] in groups)]
    if not values:
        return None
    values.sort()
    return values[len(values) // 2], values[-1]


def goals(full, soak):
    """(goal, measured, verdict) rows for the latency and footprint goals this harness measures."""
    rows = []

    def verdict(ok):
        return "—" if ok is None else ("met" if ok else "**missed**")

    if full:
        for rate in (1000, 3000):
            p, n = find(full, "memgate-pass", rate, "sweep"), find(full, "nginx", rate, "sweep")
            if p and n:
                a, b = added(full, p), added(full, n)
                ok = a is not None and b is not None and (a <= 2 * max(b, 0.0) or a <= 0)
                rows.append((f"pass-through added p99 within 2× nginx's at {rate}/s",
                             f"{ms(a)} ms vs nginx {ms(b)} ms", verdict(ok)))
        p = find(full, "memgate-pass", 3000, "sweep")
        if p:
            rows.append(("≥ 3,000 req/s sustained (pass-through)",
                         f"at 3000/s: {errors_column(p)} errors, p99 {p['latency_ms']['p99']:.2f} ms",
                         verdict(sustained(p))))
        big = find(full, "funnel-big", 1000, "big")
        if big:
            records = full["settings"]["records"]
            a = added(full, big)
            label = f"funnel, warm, {records:,} records: p99 added ≤ 3 ms at 1000/s"
            rows.append((label + ("" if records >= 100000 else " (fewer records than the goal's 100,000)"),
                         f"{ms(a)} ms ({memory_column(big)})", verdict(a is not None and a <= 3 and sustained(big))))
        new = find(full, "funnel-new", 100, "newq")
        if new:
            a = added(full, new)
            rows.append(("funnel, every query new: p99 added ≤ 25 ms at 100/s",
                         f"{ms(a)} ms ({memory_column(new)})",
                         verdict(a is not None and a <= 25 and sustained(new)
                                 and not new.get("header_counts", {}).get("x-memory-status", {}).get("degraded"))))
        for system in ("memgate-pass-stream", "funnel-warm-stream"):
            for run in [r for r in full["runs"] if r["system"] == system]:
                a = added(full, run, "ttft_ms", "p50")
                rows.append((f"streaming: added time to first token p50 ≤ 1 ms ({TITLES[system]}, {run['rate']}/s)",
                             f"{ms(a, 3)} ms", verdict(a is not None and a <= 1)))
        ceiling = highest_sustained(full, "litellm")
        lite50 = find(full, "litellm", 50, "litellm")
        warm = find(full, "funnel-warm", 1000, "sweep")
        if ceiling is not None or find(full, "litellm"):
            top = highest_sustained(full, "funnel-warm")
            rows.append(("funnel serves ≥ 30× LiteLLM's ceiling",
                         (f"LiteLLM sustained {ceiling} req/s" if ceiling else
                          f"LiteLLM sustained none of {', '.join(str(r) for r in full['settings']['litellm_rates'])} req/s")
                         + f"; memgate funnel (warm) {top or '—'} req/s "
                         f"(highest rate tried: {max(full['settings']['rates'])})",
                         verdict(ceiling is not None and top is not None and top >= 30 * ceiling)))
        if lite50 and warm:
            a, b = added(full, warm), added(full, lite50)
            rows.append(("funnel adds ≤ 1/20 of LiteLLM's p99 (memgate at 1000/s, LiteLLM at 50/s)",
                         f"{ms(a)} ms vs LiteLLM {ms(b)} ms (ratio {a / b:.3f})" if a is not None and b else "—",
                         verdict(a is not None and b is not None and b > 0 and a <= b / 20)))
        mem = full.get("memory", {})
        if "memgate-pass" in mem:
            idle = mem["memgate-pass"]["rss_idle_mb"]
            rows.append(("resident memory ≤ 300 MB idle, model loaded", f"{idle:.0f} MB", verdict(idle <= 300)))
        if "memgate-big" in mem:
            m = mem["memgate-big"]
            rows.append((f"resident memory ≤ 400 MB with 100,000 records ({m['records']:,} here)",
                         f"{m['rss_loaded_mb']:.0f} MB loaded, {m.get('rss_end_mb', 0):.0f} MB after the runs",
                         verdict(m["rss_loaded_mb"] <= 400 if m["records"] >= 100000 else None)))
        ingests = full.get("ingest", {})
        ing = ingests.get("memgate-big")
        if (ing is None or ing.get("from_cache")) and ingests.get("memgate-funnel"):
            ing = ingests["memgate-funnel"]  # measured by this run's binary
        if ing:
            rows.append(("ingest ≥ 110 records/s until searchable",
                         f"{ing['records_per_s']} records/s ({ing['records']:,} in {ing['searchable_s']:.0f} s"
                         + (", measured when the records cache was made" if ing.get("from_cache") else "") + ")",
                         verdict(ing["records_per_s"] is not None and ing["records_per_s"] >= 110)))
    if soak and soak.get("soak"):
        v = soak["soak"]
        rows.append((f"soak {v['seconds'] / 60:.0f} min at {v['rate']:.0f}/s through the funnel: no failed request, "
                     f"flat memory (memgate {soak['machine']['commit']})", v["summary"], verdict(v["pass"])))
    return rows


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def latency_rows(results, groups, nginx_ratio=True):
    rows = []
    for run in results["runs"]:
        if run["group"] not in groups:
            continue
        floor = floor_of(results, run)
        a50, a99 = added(results, run, q="p50"), added(results, run)
        ratio = "—"
        if nginx_ratio and run["system"] not in ("direct", "nginx"):
            ng = find(results, "nginx", run["rate"], run["group"])
            b = added(results, ng) if ng else None
            if a99 is not None and b is not None and b > 0:
                ratio = f"{a99 / b:.1f}×"
        lat = run["latency_ms"]
        rows.append((TITLES.get(run["system"], run["system"]), run["rate"], f"{run['achieved_rate']:.0f}",
                     errors_column(run), plain(lat["p50"], 3), plain(lat["p99"], 3),
                     "floor" if run is floor else ms(a50, 3), "floor" if run is floor else ms(a99, 3), ratio,
                     memory_column(run), plain(run.get("cpu", {}).get("other"), 2)))
    return rows


LAT_HEADER = ["system", "offered req/s", "achieved", "errors", "p50 ms", "p99 ms", "added p50", "added p99",
              "added p99 ÷ nginx's", "memory (X-Memory-Status; mean injected)", "other CPU (cores)"]


def page(full, soak, img_prefix):
    out = ["# Load benchmarks: memgate beside nginx and LiteLLM", ""]
    out.append("Generated by `bash loadtest/bench-all.sh` (full) and `bash loadtest/bench-all.sh soak`; do not "
               "edit by hand, re-run them (`bash loadtest/bench-all.sh report` rewrites this page from "
               "`loadtest/results/`). What each scenario measures and how: [loadtest/README.md]"
               "(../loadtest/README.md#the-benchmark-harness-bench-allsh). Every system runs on this machine in front "
               "of the same `memgate mock-upstream`; the load is open-loop (each request starts on its schedule; "
               "latency from the scheduled time to the last byte), so a slow system cannot hide in a slower send "
               "rate. *Added* = the run's percentile minus the direct run's at the same rate, measured minutes "
               "apart. *Other CPU* = cores busy during the run with processes that are not the benchmark's "
               "(other builds and tests): near 0 means a quiet machine; above ~0.2 the tails are not "
               "trustworthy.")
    out.append("")
    if full:
        out.append(f"**Run:** `{full['mode']}`, {full['started_at']} → {full.get('finished_at', '?')}; "
                   f"{full['settings']['duration']:g} s per run after a {full['settings']['warmup']:g} s "
                   f"warm-up. **Machine:** {machine_line(full)}.")
        oc = other_cpu(full)
        if oc:
            quiet = "quiet" if oc[0] < 0.2 else "**busy with other work: these figures are preliminary**"
            out.append(f"Other CPU during the runs: median {oc[0]:.2f}, max {oc[1]:.2f} cores ({quiet}).")
        out.append("")
    rows = goals(full, soak)
    if rows:
        out += ["## The goals", "", table(["goal", "measured", "verdict"], rows), ""]
    if not full:
        out += ["No full run yet: `bash loadtest/bench-all.sh full`.", ""]
    else:
        out += [f"## Added latency against offered rate", "",
                f"![added p99 latency against offered rate]({img_prefix}load-p99.png)", "",
                "One line per system: p99 of the run minus p99 of the direct run at the same rate (log scales; "
                "a red cross marks a rate the system did not sustain: more than 0.1% errors or p99 over "
                f"{SUSTAINED_P99_MS} ms).", ""]
        groups = [("sweep", "Pass-through and peers, and the funnel with warm query embeddings",
                   "`memgate-pass`: `--auth-mode passthrough`, memory on, no records in the store (the default "
                   "tenant has none, so recall returns before embedding). `funnel, warm`: managed mode, a gateway "
                   f"key (`team:support`, subject `{'u-7'}`), {full['settings']['funnel_records']:,} records, 32 "
                   "questions sent in turn (after the warm-up every query embedding comes from the cache)."),
                  ("newq", "The funnel with every query new",
                   "Each request's question is new (`loadgen --unique`), so memgate runs the embedding model for "
                   "every request. `degraded` answers went upstream without memory because the memory step "
                   "overran its time budget (`memory.funnel_timeout_ms`, 50 ms)."),
                  ("big", f"The funnel with {full['settings']['records']:,} records in one tenant",
                   "Managed mode, the same key and warm questions; about half of the records are visible to the "
                   "caller (`team:support`, the rest belong to 500 customers)."),
                  ("litellm", "LiteLLM",
                   "LiteLLM " + full.get("peers", {}).get("litellm", {}).get("version", "") + ", one worker, no "
                   "database, `POST /v1/messages` through its `anthropic/` provider with `api_base` = the mock "
                   "(every answer checked to have reached the mock: see *upstream seen*).")]
        for group, title, text in groups:
            if not any(r["group"] == group for r in full["runs"]):
                continue
            out += [f"## {title}", "", text, ""]
            rows = latency_rows(full, {group}, nginx_ratio=(group == "sweep"))
            if group == "litellm":
                header = LAT_HEADER[:8] + ["other CPU (cores)"]
                rows = [r[:8] + (r[10],) for r in rows]
                out += [table(header, rows), ""]
                seen = [(r["rate"], r["count"], r.get("upstream_seen")) for r in full["runs"] if r["system"] == "litellm"]
                out.append("Upstream seen (requests the mock recorded during the measured run, against 2xx "
                           "answers): " + "; ".join(f"{rate}/s: {seen} of {ok}" for rate, ok, seen in seen) + ".")
                ceiling = highest_sustained(full, "litellm")
                lowest = min((r for r in full["runs"] if r["system"] == "litellm"), key=lambda r: r["rate"])
                out += ["", (f"Highest rate LiteLLM sustained: **{ceiling} req/s**." if ceiling else
                             f"LiteLLM sustained none of the rates tried (at {lowest['rate']}/s: p99 "
                             f"{lowest['latency_ms']['p99']:.0f} ms, {errors_column(lowest)} errors)."), ""]
                lite50 = find(full, "litellm", 50, "litellm")
                lite_added = added(full, lite50) if lite50 else None
                rows = []
                for system, group in (("memgate-pass", "sweep"), ("funnel-warm", "sweep"), ("funnel-big", "big")):
                    top = highest_sustained(full, system)
                    at1000 = find(full, system, 1000, group)
                    a = added(full, at1000) if at1000 else None
                    rows.append((TITLES[system], f"{top or '—'}",
                                 f"{top / ceiling:.0f}×" if top and ceiling else "—", ms(a, 3),
                                 f"{a / lite_added:.3f}" if a is not None and lite_added else "—"))
                if rows:
                    note = "" if lite50 is None or sustained(lite50) else " LiteLLM did not sustain 50/s here, so its p99 there is a queue's."
                    out += ["Against LiteLLM (goal: ≥ 30× its ceiling, ≤ 1/20 = 0.050 of its added p99)." + note, "",
                            table(["memgate", "highest sustained req/s (of those tried)", "÷ LiteLLM's ceiling",
                                   "added p99 at 1000/s", "÷ LiteLLM's added p99 at 50/s ("
                                   + ms(lite_added, 2) + " ms)"], rows), ""]
            else:
                out += [table(LAT_HEADER if group == "sweep" else LAT_HEADER[:8] + LAT_HEADER[9:], rows
                              if group == "sweep" else [r[:8] + r[9:] for r in rows]), ""]
        stream = [r for r in full["runs"] if r["group"] == "stream"]
        if stream:
            out += ["## Streaming: added time to first token", "",
                    f"`stream: true`; the mock's stream: first delta {full['settings'].get('mock_stream', '0,0').split(',')[0]} ms "
                    f"after `message_start`, 5 text deltas {full['settings'].get('mock_stream', '0,0').split(',')[1]} ms apart "
                    "(`MOCK_STREAM`). Time to first token (TTFT) = from the scheduled send time to the chunk that "
                    "holds the first `content_block_delta`. memgate relays a stream event by event: on a socket "
                    "without TCP_NODELAY an event written while the previous one is unacknowledged waits for the "
                    "client's delayed ACK, ~40 ms. At fcce8c3 neither memgate's listener nor the mock's set it "
                    "and memgate added ~42 ms; both set it from 5a95e0e on "
                    "([loadtest/results/experiments](../loadtest/results/experiments/README.md)).", ""]
            rows = []
            for run in stream:
                floor = floor_of(full, run)
                t = run["ttft_ms"]
                rows.append((TITLES[run["system"]], run["rate"], errors_column(run), plain(t["p50"], 3),
                             plain(t["p99"], 3),
                             "floor" if run is floor else ms(added(full, run, "ttft_ms", "p50"), 3),
                             "floor" if run is floor else ms(added(full, run, "ttft_ms", "p99"), 3),
                             plain(run["latency_ms"]["p50"], 3), plain(run.get("cpu", {}).get("other"), 2)))
            out += [table(["system", "offered req/s", "errors", "TTFT p50 ms", "TTFT p99 ms", "added TTFT p50",
                           "added TTFT p99", "whole stream p50 ms", "other CPU (cores)"], rows), ""]
        mem = full.get("memory", {})
        if mem:
            out += ["## Resident memory", "",
                    "VmRSS from /proc (with children for nginx and LiteLLM). *Idle* = ready, before any "
                    "request; the embedding model is loaded at start.", ""]
            rows = []
            for name, m in mem.items():
                rows.append((name, f"{m.get('records', 0):,}", plain(m.get("rss_idle_mb"), 0),
                             plain(m.get("rss_after_import_mb") or m.get("rss_loaded_mb"), 0),
                             plain(m.get("rss_end_mb"), 0), plain(m.get("hwm_mb"), 0)))
            for name, p in full.get("peers", {}).items():
                rows.append((f"{name} ({p.get('version', '')})", "—", plain(p.get("rss_idle_mb"), 0), "—",
                             plain(p.get("rss_end_mb"), 0), "—"))
            out += [table(["process", "records", "idle MB", "records loaded MB", "after the runs MB", "peak MB"],
                          rows), ""]
        ing = full.get("ingest", {})
        if ing:
            out += ["## Ingest until searchable", "",
                    "`POST /admin/v1/import`, 1,000 JSON Lines a request; *paced*: each request waits until "
                    "the previous one's records have a stored embedding of the running model (read from the "
                    "SQLite store), because unpaced requests make memgate start one background embedding task "
                    "per request over every record still missing a vector (the same records embedded many "
                    "times over; past 8 GB resident at 43,000 records). No query traffic meanwhile. Searchable "
                    "= every record embedded.", ""]
            rows = [(name, f"{i['records']:,}", "paced" if i.get("paced") else "unpaced",
                     plain(i["searchable_s"], 0), plain(i["records_per_s"], 1), plain(i.get("rss_peak_mb"), 0),
                     (f"from the cache made {i['cached_at']}" if i.get("from_cache") else "this run")
                     + (f": {i['note']}" if i.get("note") else ""))
                    for name, i in ing.items()]
            out += [table(["instance", "records", "requests", "searchable after s", "records/s", "peak RSS MB",
                           "when"], rows), ""]
    if soak and soak.get("soak"):
        v = soak["soak"]
        out += ["## Soak", "",
                f"`bash loadtest/bench-all.sh soak`: {v['seconds'] / 60:.0f} minutes at {v['rate']:.0f} req/s through "
                f"the funnel (warm questions, {soak['settings']['funnel_records']:,} records), memgate's RSS sampled every "
                f"{soak['settings']['soak_sample']:.0f} s into `loadtest/results/soak/soak-rss.csv`. Run "
                f"{soak['started_at']}; machine: {machine_line(soak)}.", "",
                f"**{'PASS' if v['pass'] else 'FAIL'}**: {v['summary']}. (Memory is *flat* when the largest RSS "
                "of the last minute is at most 5%, and at most 32 MB, above the largest of the second minute.)", "",
                f"![soak: RSS and p99 over time]({img_prefix}soak.png)", ""]
    out += ["## Reading these figures", "",
            "- The load generator, the mock and the system under test share the machine's cores: at high rates "
            "they compete for CPU, and the tails (p99) of every system grow with it. The difference to the "
            "direct run is what the proxy hop costs on this machine, not on a dedicated one.",
            "- A run with errors has its latency figures over its 2xx answers only; look at the errors column "
            "first.",
            "- Raw figures (every percentile, send lag, CPU split, embedding counters): "
            "`loadtest/results/full/results.json`, `loadtest/results/soak/results.json`.", ""]
    return "\n".join(out)


def write_all(repo, results_dir=None):
    """Writes the page (and plots): into docs/ from loadtest/results/{full,soak}, or, for a run
    with its own results folder (quick, or RESULTS_DIR), into that folder from its results."""
    plot_python = os.path.join(repo, "loadtest", ".venv-plot", "bin", "python")
    plot_script = os.path.join(repo, "loadtest", "harness", "plot.py")
    if results_dir:
        with open(os.path.join(results_dir, "results.json")) as f:
            res = json.load(f)
        full, soak = (None, res) if res["mode"] == "soak" else (res, None)
        out_dir, img_prefix = results_dir, ""
        paths = {"full": None if soak else os.path.join(results_dir, "results.json"),
                 "soak": os.path.join(results_dir, "results.json") if soak else None}
    else:
        full, soak = load(repo, "full"), load(repo, "soak")
        out_dir, img_prefix = os.path.join(repo, "docs"), "img/"
        paths = {mode: os.path.join(repo, "loadtest", "results", mode, "results.json") for mode in ("full", "soak")}
    img_dir = os.path.join(out_dir, img_prefix)
    os.makedirs(img_dir, exist_ok=True)
    with open(os.path.join(out_dir, "benchmarks-load.md"), "w") as f:
        f.write(page(full, soak, img_prefix))
    print(f"wrote {os.path.join(out_dir, 'benchmarks-load.md')}", flush=True)
    if not os.path.exists(plot_python):
        print("no loadtest/.venv-plot: run `bash loadtest/peers/setup.sh plot` for the plots", flush=True)
        return
    args = [plot_python, plot_script, img_dir]
    for mode, res in (("full", full), ("soak", soak)):
        if res and paths[mode]:
            args.append(f"{mode}={paths[mode]}")
    subprocess.run(args, check=False)
