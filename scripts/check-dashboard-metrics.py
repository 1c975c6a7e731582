#!/usr/bin/env python3
"""Checks that the Grafana dashboards in deploy/grafana/ name only metrics memgate exports.

It starts the real binary: `memgate mock-upstream`, and `memgate serve` in front of it with the
configuration of the Kubernetes manifests (deploy/k8s/base/memgate.toml, so that file is proven to
load too), both on loopback ports the OS picks, with a SQLite store in a temporary folder. Then it
reads /metrics and parses every PromQL expression of every dashboard (panel targets and
template-variable queries) with a real PromQL parser:

- each metric name an expression selects must be a series memgate exports: a counter family `F`
  exports `F_total`, a histogram family `F` exports `F_bucket`, `F_sum` and `F_count`, a gauge
  `F` exports `F`;
- each label it names (in a matcher, `by`/`without`, `on`/`ignoring`, `group_left`) must be one
  that a metric it selects carries, or one Prometheus adds (`job`, `instance`).

prometheus-client lists a labelled family in /metrics only once it has a sample (a fresh process
shows just the three embedding counters), so before reading /metrics the check exercises every
metric: a public record written through the admin API, a first Messages request (so the upstream
accepts the caller's key), one that injects the record, one whose malformed `system` makes the
memory step fail (degraded, reason `placement`), and a canary of `v2` rolled back. Each step checks its answer; a step that stops working fails the check with
exit 2, never by passing with fewer metrics.

Exits 0 when every name and label is exported, 1 with the list of problems, 2 when memgate cannot
be started or exercised.

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
import urllib.error
import urllib.request
from pathlib import Path

import promql_parser

REPO = Path(__file__).resolve().parents[1]
BIN = os.environ.get("MEMGATE_BIN") or str(REPO / "target" / "debug" / "memgate")
CONFIG = REPO / "deploy" / "k8s" / "base" / "memgate.toml"
STARTUP_DEADLINE_S = float(os.environ.get("MEMGATE_STARTUP_TIMEOUT", "90"))
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
ADMIN_TOKEN = "dashboard-check-admin-token"
# Labels Prometheus puts on every scraped series.
TARGET_LABELS = {"job", "instance"}

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


class ExerciseError(Exception):
    """memgate could not be started or did not answer an exercise step as expected."""


# ---- running memgate -----------------------------------------------------------------------


class Service:
    """A memgate subprocess that announced its URL; `stop()` sends SIGTERM and waits."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], workdir: Path) -> None:
        self.stderr_path = workdir / f"{name}.stderr.log"
        with open(self.stderr_path, "w") as stderr:
            self.proc = subprocess.Popen(
                [BIN, *args], cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=stderr, text=True,
            )
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            # Reads stdout for the process's whole life, so it never blocks on a full pipe.
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
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
                self.url = match.group(1)
                return
        self.stop()
        raise ExerciseError(
            f"`memgate {' '.join(args)}` did not start listening within {STARTUP_DEADLINE_S:.0f}s; "
            f"its stderr:\n{self.stderr_path.read_text(errors='replace')}"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def child_env(workdir: Path) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        # A developer's own settings and keys must not reach these processes.
        if not (name.startswith("MEMGATE_") or name.startswith("ANTHROPIC_"))
        or name in ("MEMGATE_MODEL_DIR", "MEMGATE_LOG_LEVEL")
    }
    assets = REPO / ".assets"
    env.setdefault("MEMGATE_MODEL_DIR", str(assets / "models" / "multilingual-e5-small"))
    libs = sorted((assets / "onnxruntime").glob("libonnxruntime.so*"))
    if libs:
        env.setdefault("ORT_DYLIB_PATH", str(libs[-1]))
    env["MEMGATE_DATABASE_URL"] = f"sqlite://{workdir / 'memgate.db'}"
    env["MEMGATE_ADMIN_TOKEN"] = ADMIN_TOKEN
    return env


def call(method: str, url: str, body: object | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()
    except OSError as err:  # refused, reset, timed out
        raise ExerciseError(f"{method} {url}: {err}") from err


def expect(step: str, got: tuple[int, dict[str, str], bytes], status: int, headers: dict[str, str] | None = None) -> None:
    code, answer_headers, body = got
    wrong = [f"{name}: {answer_headers.get(name)!r} (want {want!r})" for name, want in (headers or {}).items() if answer_headers.get(name) != want]
    if code != status or wrong:
        raise ExerciseError(f"exercise step `{step}`: status {code} (want {status}) {'; '.join(wrong)}\n{body[:500]!r}")


def exercise(url: str) -> None:
    """Makes every metric family memgate registers produce a sample."""
    admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    caller = {"x-api-key": "sk-ant-dashboard-check", "anthropic-version": "2023-06-01"}
    record = {"type": "fact", "scope": ["public"], "key": "dashboard-check",
              "content": {"statement": "The dashboard check exercises every metric."}}
    expect("create a public record", call("POST", f"{url}/admin/v1/memories", record, admin), 201)
    # The record's key named in the question: it passes the funnel without a similarity score.
    message = {"model": "claude-dashboard-check", "max_tokens": 16,
               "messages": [{"role": "user", "content": "What is dashboard-check?"}]}
    # A passthrough caller's key gets memory once the upstream has accepted it: one request first.
    expect("a first Messages request (the upstream accepts the caller's key)",
           call("POST", f"{url}/v1/messages", message, caller), 200)
    expect("a Messages request that injects the record", call("POST", f"{url}/v1/messages", message, caller), 200,
           {"x-memory-injected": "1", "x-memory-status": "ok"})
    # A `system` that is neither a string nor blocks: the block has nowhere to go, so the memory
    # step fails (reason `placement`) and the request goes on without it.
    expect("a Messages request whose memory step fails", call("POST", f"{url}/v1/messages", {**message, "system": 42}, caller),
           200, {"x-memory-status": "degraded"})
    expect("start a canary of v2", call("PATCH", f"{url}/admin/v1/releases/v2", {"stage": "canary", "canary_percent": 5}, admin), 200)
    expect("roll the canary back", call("POST", f"{url}/admin/v1/releases/v2/rollback", {"reason": "dashboard check"}, admin), 200)


def scrape() -> str:
    with tempfile.TemporaryDirectory(prefix="memgate-dashboard-check-") as tmp:
        workdir = Path(tmp)
        env = child_env(workdir)
        if not os.access(BIN, os.X_OK):
            raise ExerciseError(f"no memgate binary at {BIN} (cargo build, or set MEMGATE_BIN)")
        upstream = Service("mock-upstream", ["mock-upstream", "--listen", "127.0.0.1:0"], env, workdir)
        try:
            # Passthrough: the exercise's caller needs no gateway key; the file's other settings
            # (and its validity) are what the Kubernetes pods run with.
            gateway = Service("serve", ["serve", "--config", str(CONFIG), "--listen", "127.0.0.1:0",
                                        "--upstream-url", upstream.url, "--auth-mode", "passthrough"], env, workdir)
            try:
                exercise(gateway.url)
                code, _, body = call("GET", f"{gateway.url}/metrics")
                if code != 200:
                    raise ExerciseError(f"GET /metrics answered {code}")
                return body.decode()
            finally:
                gateway.stop()
        finally:
            upstream.stop()


# ---- reading /metrics and the dashboards ---------------------------------------------------


def exported(text: str) -> tuple[dict[str, str], dict[str, set[str]]]:
    """Families by name with their type, and every series name each family exports with the
    label names its samples carry."""
    families: dict[str, str] = {}
    labels: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            families[name] = kind.strip()
        elif line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            name = name.split(" ")[0]
            found = set(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="', rest.rsplit("}", 1)[0])) if rest else set()
            labels.setdefault(name, set()).update(found)
    series: dict[str, set[str]] = {}
    for family, kind in families.items():
        for suffix in SUFFIXES.get(kind, [""]):
            series[family + suffix] = labels.get(family + suffix, set())
    return families, series


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


def references(expr: str) -> tuple[set[str], set[str]]:
    """The metric names and the label names an expression uses, from its syntax tree."""
    tree = promql_parser.parse(GRAFANA_DURATIONS.sub("5m", expr))
    names: set[str] = set()
    labels: set[str] = set()

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            for matcher in node.matchers.matchers:
                if matcher.name != "__name__":
                    labels.add(matcher.name)
                elif matcher.op == promql_parser.MatchOp.Equal:
                    names.add(matcher.value)
                else:
                    raise ValueError(f"a __name__ matcher that is not `=` cannot be checked: {matcher}")
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            labels.update(node.modifier.labels)
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None:
            if node.modifier.matching is not None:
                labels.update(node.modifier.matching.labels)
            labels.update(node.modifier.group_labels or [])
        return True

    promql_parser.walk(tree, visit)
    return names, labels


def main() -> int:
    dashboards = [Path(arg) for arg in sys.argv[1:]] or sorted((REPO / "deploy" / "grafana").glob("*.json"))
    try:
        text = scrape()
    except ExerciseError as err:
        print(f"check-dashboard-metrics: {err}", file=sys.stderr)
        return 2
    families, series = exported(text)

    problems: list[str] = []
    used: set[str] = set()
    count = 0
    for dashboard in dashboards:
        for where, expr in dashboard_queries(json.loads(dashboard.read_text())):
            count += 1
            try:
                names, labels = references(expr)
            except Exception as err:  # the parser's errors have no common base class
                problems.append(f"{dashboard.name}: {where}: cannot parse `{expr}`: {err}")
                continue
            if not names:
                problems.append(f"{dashboard.name}: {where}: names no metric: `{expr}`")
            for name in sorted(names - series.keys()):
                problems.append(f"{dashboard.name}: {where}: `{name}` is not exported by memgate")
            known = TARGET_LABELS.union(*(series.get(name, set()) for name in names))
            for label in sorted(labels - known):
                problems.append(f"{dashboard.name}: {where}: label `{label}` is on none of {sorted(names)}")
            used |= names
    if problems:
        print("check-dashboard-metrics: FAILED", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        print(f"  memgate exports: {', '.join(sorted(series))}", file=sys.stderr)
        return 1
    unused = sorted(f for f in families if not any(f + s in used for s in SUFFIXES.get(families[f], [""])))
    print(
        f"check-dashboard-metrics: ok: {count} expressions in {len(dashboards)} dashboard(s) use "
        f"{len(used)} series, all exported by memgate with the labels they name "
        f"({len(families)} families; not on a dashboard: {', '.join(unused) or 'none'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
