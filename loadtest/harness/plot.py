"""Plots for docs/benchmarks-load.md (run with loadtest/.venv-plot/bin/python, matplotlib):

    plot.py IMG_DIR full=loadtest/results/full/results.json [soak=loadtest/results/soak/results.json]

- load-p99.png: added p99 latency against offered rate, one line per system (log-log);
- soak.png: memgate's RSS and the p99 of each 10-s window over the soak.
"""

import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402

LINES = [  # system, label, style
    ("nginx", "nginx proxy_pass", dict(color="#2ca02c", marker="s")),
    ("memgate-pass", "memgate pass-through", dict(color="#1f77b4", marker="o")),
    ("funnel-warm", "memgate funnel, warm queries", dict(color="#9467bd", marker="^")),
    ("funnel-big", "memgate funnel, warm, big tenant", dict(color="#8c564b", marker="v")),
    ("funnel-new", "memgate funnel, every query new", dict(color="#e377c2", marker="D")),
    ("litellm", "LiteLLM proxy", dict(color="#ff7f0e", marker="P")),
]
FLOOR_MS = 0.01  # an added p99 at or below zero is drawn here (a log scale has no zero)


def load_plot(results, path):
    fig, ax = plt.subplots(figsize=(11, 5.5), dpi=110)
    for system, label, style in LINES:
        runs = sorted((r for r in results["runs"] if r["system"] == system), key=lambda r: r["rate"])
        points = [(r["rate"], report.added(results, r), report.sustained(r)) for r in runs]
        points = [(x, max(y, FLOOR_MS), ok) for x, y, ok in points if y is not None]
        if not points:
            continue
        if system == "funnel-big":
            label += f" ({results['settings']['records']:,} records)"
        ax.plot([p[0] for p in points], [p[1] for p in points], label=label, linewidth=1.6, markersize=5, **style)
        bad = [p for p in points if not p[2]]
        if bad:
            ax.scatter([p[0] for p in bad], [p[1] for p in bad], marker="x", s=90, color="red", zorder=5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    rates = sorted({r["rate"] for r in results["runs"] if r["system"] != "direct"})
    ax.set_xticks(rates)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("offered rate (requests/s, open loop)")
    ax.set_ylabel(f"added p99 latency vs direct (ms; ≤ 0 drawn at {FLOOR_MS})")
    m = results["machine"]
    ax.set_title(f"Added p99 latency, {m['nproc']} cores, generator + mock + proxy on one machine", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.scatter([], [], marker="x", s=60, color="red", label="not sustained (>0.1% errors or p99 > 500 ms)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


def soak_plot(results, path, csv_path):
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    run = next(r for r in results["runs"] if r["group"] == "soak")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), dpi=120, sharex=True)
    top.plot([float(r["t_s"]) / 60 for r in rows], [float(r["memgate_rss_mb"]) for r in rows], color="#1f77b4",
             label="memgate RSS")
    top.set_ylabel("RSS (MB)")
    top.set_ylim(bottom=0)
    top.grid(True, alpha=0.3)
    load = top.twinx()
    load.plot([float(r["t_s"]) / 60 for r in rows], [float(r["load1"]) for r in rows], color="#999999",
              linewidth=0.8, label="machine load average (1 min), right axis")
    load.set_ylabel("load average")
    load.set_ylim(bottom=0)
    lines = top.get_legend_handles_labels()
    more = load.get_legend_handles_labels()
    top.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="lower right")
    windows = run.get("windows", [])
    bottom.plot([w["start_s"] / 60 for w in windows], [w["p99_ms"] for w in windows], color="#9467bd",
                label="p99 of each 10-s window (whole latency, not added)")
    bottom.plot([w["start_s"] / 60 for w in windows], [w["p50_ms"] for w in windows], color="#aaaaaa",
                label="p50")
    errs = [w for w in windows if w["errors"]]
    if errs:
        bottom.scatter([w["start_s"] / 60 for w in errs], [w["p99_ms"] for w in errs], marker="x", color="red",
                       label="window with errors")
    bottom.set_yscale("log")
    bottom.set_ylabel("latency (ms)")
    bottom.set_xlabel("minutes (RSS clock starts at the measured run; latency by scheduled time)")
    bottom.grid(True, which="both", alpha=0.3)
    bottom.legend(fontsize=8, loc="upper left", framealpha=0.8)
    v = results["soak"]
    fig.suptitle(f"Soak {v['seconds'] / 60:.0f} min at {v['rate']:.0f} req/s through the funnel: "
                 f"{'PASS' if v['pass'] else 'FAIL'}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


def main():
    img_dir = sys.argv[1]
    for arg in sys.argv[2:]:
        kind, path = arg.split("=", 1)
        with open(path) as f:
            results = json.load(f)
        if kind == "full":
            load_plot(results, os.path.join(img_dir, "load-p99.png"))
        elif kind == "soak" and results.get("soak"):
            soak_plot(results, os.path.join(img_dir, "soak.png"),
                      os.path.join(os.path.dirname(path), "soak-rss.csv"))


if __name__ == "__main__":
    main()
