#!/usr/bin/env python3
"""Checks that the Grafana dashboards in deploy/grafana/ name only metrics memgate exports.

It starts the real binary (`memgate serve` on a loopback port the OS picks, a SQLite store in a
temporary folder, the configuration of the Kubernetes manifests, deploy/k8s/base/memgate.toml, so
that file is proven to load too), reads its /metrics, and parses every PromQL expression of every
dashboard (panel targets and template-variable queries) with a real PromQL parser. Each metric
name an expression selects must be a series memgate exports:

- a counter family `F` exports `F_total`; a histogram family `F` exports `F_bucket`, `F_sum` and
  `F_count`; a gauge `F` exports `F`;
- the families come from the `# TYPE` lines, which prometheus-client prints for every registered
  family, also one without samples yet (a fresh process has counted no rollback or degraded
  request; the check verifies that such families are listed).

Exits 0 when every name is exported, 1 with the list of unknown names or unparsable expressions,
2 when memgate cannot be started.

Usage: scripts/check-dashboard-metrics.py [DASHBOARD.json ...]
Environment: MEMGATE_BIN (default target/debug/memgate), MEMGATE_MODEL_DIR and ORT_DYLIB_PATH
(default: where scripts/fetch-assets puts them). Needs the `promql_parser` package
(scripts/lint-deploy runs this with its own environment, which has it).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import promql_parser

REPO = Path(__file__).resolve().parents[1]
BIN = os.environ.get("MEMGATE_BIN") or str(REPO / "target" / "debug" / "memgate")
CONFIG = REPO / "deploy" / "k8s" / "base" / "memgate.toml"
STARTUP_DEADLINE_S = float(os.environ.get("MEMGATE_STARTUP_TIMEOUT", "90"))
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")

# Series names each metric type exports, from the family name (OpenMetrics, as prometheus-client
# writes it and Prometheus stores it).
SUFFIXES = {
    "counter": ["_total"],
    "histogram": ["_bucket", "_sum", "_count"],
    "gaugehistogram": ["_bucket", "_gsum", "_gcount"],
    "summary": ["", "_sum", "_count"],
    "gauge": [""],
    "info": ["_info"],
    "stateset": [""],
    "unknown": [""],
}

# Grafana's built-in interval variables stand where PromQL wants a duration.
GRAFANA_DURATIONS = re.compile(r"\$\{?__(rate_interval|interval|range|interval_ms|range_s|range_ms)\}?")


def start_memgate(workdir: Path) -> tuple[subprocess.Popen[str], str]:
    """Starts `memgate serve` and returns it with its base URL, or exits 2 with its stderr."""
    if not os.access(BIN, os.X_OK):
        sys.exit(f"check-dashboard-metrics: no memgate binary at {BIN} (cargo build, or set MEMGATE_BIN)")
    env = {
        name: value
        for name, value in os.environ.items()
        # A developer's own settings and keys must not reach this process.
        if not (name.startswith("MEMGATE_") or name.startswith("ANTHROPIC_"))
        or name in ("MEMGATE_MODEL_DIR", "MEMGATE_LOG_LEVEL")
    }
    assets = REPO / ".assets"
    env.setdefault("MEMGATE_MODEL_DIR", str(assets / "models" / "multilingual-e5-small"))
    libs = sorted((assets / "onnxruntime").glob("libonnxruntime.so*"))
    if libs:
        env.setdefault("ORT_DYLIB_PATH", str(libs[-1]))
    env["MEMGATE_DATABASE_URL"] = f"sqlite://{workdir / 'memgate.db'}"
    # The configuration's `managed` mode wants an upstream key; nothing is sent upstream here.
    env["ANTHROPIC_API_KEY"] = "sk-ant-dashboard-check-placeholder"
    stderr_path = workdir / "memgate.stderr.log"
    args = [BIN, "serve", "--config", str(CONFIG), "--listen", "127.0.0.1:0"]
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(
            args, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        # Reads stdout for the process's whole life, so it never blocks on a full pipe.
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=min(remaining, 0.5))
        except queue.Empty:
            continue
        if line is None:
            break
        if match := LISTENING.search(line):
            return proc, match.group(1)
    stop(proc)
    print(f"check-dashboard-metrics: `{' '.join(args)}` did not start listening within "
          f"{STARTUP_DEADLINE_S:.0f}s; its stderr:\n{stderr_path.read_text(errors='replace')}", file=sys.stderr)
    sys.exit(2)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def exported_series(text: str) -> tuple[dict[str, str], set[str], set[str]]:
    """Families by name with their type, every series name a family exports, and the series
    names that have samples right now."""
    families: dict[str, str] = {}
    sampled: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            families[name] = kind.strip()
        elif line and not line.startswith("#"):
            sampled.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    series = {family + suffix for family, kind in families.items() for suffix in SUFFIXES.get(kind, [""])}
    return families, series, sampled


def dashboard_queries(node: object, where: str = "") -> list[tuple[str, str]]:
    """Every PromQL expression in a dashboard: panel targets (`expr`) and the queries of template
    variables (a `label_values(EXPR, label)` or `query_result(EXPR)` gives its EXPR)."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        title = node.get("title") or node.get("name") or where
        for key, value in node.items():
            if key == "expr" and isinstance(value, str) and value.strip():
                found.append((title, value))
            elif key == "definition" and node.get("type") == "query":
                continue  # the text Grafana shows for `query`, checked there
            elif key == "query" and node.get("type") == "query":
                text = value.get("query") if isinstance(value, dict) else value
                if isinstance(text, str) and (inner := variable_expr(text)):
                    found.append((f"variable {title}", inner))
            else:
                found.extend(dashboard_queries(value, title))
    elif isinstance(node, list):
        for item in node:
            found.extend(dashboard_queries(item, where))
    return found


def variable_expr(text: str) -> str | None:
    match = re.fullmatch(r"\s*(label_values|query_result)\((.*)\)\s*", text, re.S)
    if not match:
        return None
    args = match.group(2)
    if match.group(1) == "label_values":
        if "," not in args:
            return None  # label_values(label): no metric named
        args = args.rsplit(",", 1)[0]
    return args


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects, by its parsed syntax tree."""
    tree = promql_parser.parse(GRAFANA_DURATIONS.sub("5m", expr))
    names: set[str] = set()

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            for matcher in node.matchers.matchers:
                if matcher.name == "__name__":
                    if matcher.op != promql_parser.MatchOp.Equal:
                        raise ValueError(f"a __name__ matcher that is not `=` cannot be checked: {matcher}")
                    names.add(matcher.value)
        return True

    promql_parser.walk(tree, visit)
    return names


def main() -> int:
    dashboards = [Path(arg) for arg in sys.argv[1:]] or sorted((REPO / "deploy" / "grafana").glob("*.json"))
    with tempfile.TemporaryDirectory(prefix="memgate-dashboard-check-") as tmp:
        proc, url = start_memgate(Path(tmp))
        try:
            with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
                text = answer.read().decode()
        finally:
            stop(proc)
    families, series, sampled = exported_series(text)
    if not families:
        print("check-dashboard-metrics: /metrics listed no metric family", file=sys.stderr)
        return 1
    # prometheus-client lists a family before it has any sample; the check relies on that.
    unsampled = sorted(f for f, kind in families.items() if not any(f + s in sampled for s in SUFFIXES.get(kind, [""])))

    problems: list[str] = []
    used: set[str] = set()
    count = 0
    for dashboard in dashboards:
        model = json.loads(dashboard.read_text())
        for where, expr in dashboard_queries(model):
            count += 1
            try:
                names = metric_names(expr)
            except Exception as err:  # the parser's errors have no common base class
                problems.append(f"{dashboard.name}: {where}: cannot parse `{expr}`: {err}")
                continue
            if not names:
                problems.append(f"{dashboard.name}: {where}: names no metric: `{expr}`")
            for name in sorted(names - series):
                problems.append(f"{dashboard.name}: {where}: `{name}` is not exported by memgate")
            used |= names
    if problems:
        print("check-dashboard-metrics: FAILED", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        print(f"  memgate exports: {', '.join(sorted(series))}", file=sys.stderr)
        return 1
    print(
        f"check-dashboard-metrics: ok: {count} expressions in {len(dashboards)} dashboard(s) use "
        f"{len(used)} series, all exported by memgate ({len(families)} families; "
        f"{len(unsampled)} listed with no sample yet: {', '.join(unsampled) or 'none'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
