#!/usr/bin/env python3
"""The load benchmark: memgate side by side with the direct mock (the floor), nginx and
LiteLLM, open-loop at fixed offered rates, all on this machine. `loadtest/bench-all.sh` builds,
installs the peers and runs this; `loadtest/README.md` says what each scenario measures.

    python3 loadtest/harness/bench.py quick|full|soak|prepare|report|profile

Every process runs on a loopback port, is waited for by polling with a deadline, and is stopped
at the end (also on Ctrl-C or a failure). Results: `loadtest/results/<mode>/results.json`; the
table and plots: docs/benchmarks-load.md and docs/img/ (full and soak), or the results folder
(quick).
"""

import atexit
import json
import os
import platform
import resource
import re
import secrets
import shutil
import sqlite3
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import data  # noqa: E402
import procs as P  # noqa: E402
import report  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOADTEST = os.path.join(REPO, "loadtest")

# The mock's stream shape, MOCK_STREAM="TTFT_MS,DELTA_INTERVAL_MS" (5 text deltas). The default,
# "0,0", writes the whole stream at once; spaced events ("5,2") also show a proxy that buffers.
# (Before 5a95e0e the mock did not set TCP_NODELAY, and spaced events stalled ~40 ms on delayed
# ACKs on the direct floor itself.)
MOCK_STREAM = os.environ.get("MOCK_STREAM", "0,0").split(",")
MOCK_FLAGS = ["--ttft-ms", MOCK_STREAM[0], "--delta-interval-ms", MOCK_STREAM[1], "--deltas", "5"]

DEFAULTS = {
    "quick": dict(duration=3, warmup=1, rates=[100, 1000], litellm_rates=[25], newq_rates=[50],
                  stream_rates=[100], big_rates=[1000], records=5000, funnel_records=300),
    "full": dict(duration=20, warmup=3, rates=[100, 500, 1000, 2000, 3000],
                 litellm_rates=[25, 50, 100, 200], newq_rates=[25, 50, 100], stream_rates=[100, 1000],
                 big_rates=[100, 500, 1000, 2000, 3000], records=100000, funnel_records=1000),
}
DEFAULTS["soak"] = dict(DEFAULTS["full"])
DEFAULTS["prepare"] = dict(DEFAULTS["full"])
DEFAULTS["profile"] = dict(DEFAULTS["full"], duration=15, warmup=3)
GROUPS = ["sweep", "stream", "newq", "litellm", "big"]


def env_list(name, default):
    raw = os.environ.get(name)
    return [float(x) if "." in x else int(x) for x in raw.split(",") if x.strip()] if raw else default


def settings_for(mode):
    d = DEFAULTS[mode]
    s = {
        "mode": mode,
        "duration": float(os.environ.get("DURATION", d["duration"])),
        "warmup": float(os.environ.get("WARMUP", d["warmup"])),
        "rates": env_list("RATES", d["rates"]),
        "litellm_rates": env_list("LITELLM_RATES", d["litellm_rates"]),
        "newq_rates": env_list("NEWQ_RATES", d["newq_rates"]),
        "stream_rates": env_list("STREAM_RATES", d["stream_rates"]),
        "big_rates": env_list("BIG_RATES", d["big_rates"]),
        "records": int(os.environ.get("RECORDS", d["records"])),
        "funnel_records": int(os.environ.get("FUNNEL_RECORDS", d["funnel_records"])),
        "groups": [g for g in os.environ.get("SCENARIOS", ",".join(GROUPS)).split(",") if g],
        "records_cache": os.environ.get("RECORDS_CACHE", "1") == "1",
        "soak_seconds": float(os.environ.get("SOAK_SECONDS", 600)),
        "soak_rate": float(os.environ.get("SOAK_RATE", 1000)),
        "soak_sample": float(os.environ.get("SOAK_SAMPLE", 5)),
        "profile_rate": float(os.environ.get("PROFILE_RATE", 500)),
        "profile_hz": int(os.environ.get("PROFILE_HZ", 499)),
        "memgate_log_level": os.environ.get("MEMGATE_LOG_LEVEL", "info"),
        "mock_stream": os.environ.get("MOCK_STREAM", "0,0"),
        "memgate_bin": os.environ.get("MEMGATE_BIN", "/work/target-bench/release/memgate"),
        "loadgen_bin": os.environ.get("LOADGEN_BIN", "/work/target-bench/release/examples/loadgen"),
    }
    unknown = set(s["groups"]) - set(GROUPS)
    if unknown:
        sys.exit(f"SCENARIOS: unknown {sorted(unknown)}; known: {GROUPS}")
    return s


def say(text):
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def machine():
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = ""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "src", "Cargo.toml"],
                           capture_output=True, text=True).stdout.strip()
    commit = commit + (" (src/ had uncommitted changes)" if dirty else "")
    # MEMGATE_COMMIT names what MEMGATE_BIN was built from, when that is not this work tree.
    commit = os.environ.get("MEMGATE_COMMIT") or commit
    return {"nproc": os.cpu_count(), "cpu_model": model, "kernel": platform.release(), "memory": mem,
            "commit": commit,
            "loadavg_start": P.loadavg()}


def metrics(url):
    """memgate's /metrics as {"name{labels}": value}."""
    status, body = P.http("GET", url + "/metrics", timeout=10)
    out = {}
    if status != 200:
        return out
    for line in body.decode(errors="replace").splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def embedding_counters(url):
    m = metrics(url)
    pick = lambda key: m.get(key, 0.0)  # noqa: E731
    return {
        "texts": pick("memgate_embedding_texts_total"),
        "runs": pick("memgate_embedding_model_runs_total"),
        "query_model": pick('memgate_query_embeddings_total{source="model"}'),
        "query_cache": pick('memgate_query_embeddings_total{source="local_cache"}'),
    }


class Bench:
    def __init__(self, settings):
        self.s = settings
        self.results_dir = os.environ.get("RESULTS_DIR") or os.path.join(LOADTEST, "results", settings["mode"])
        os.makedirs(self.results_dir, exist_ok=True)
        self.work = tempfile.mkdtemp(prefix="memgate-bench.")
        self.procs = P.Procs(self.work)
        self.admin_token = secrets.token_hex(24)
        self.results = {"mode": settings["mode"], "settings": {k: v for k, v in settings.items()
                                                               if not k.endswith("_bin")},
                        "machine": machine(), "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                        "runs": [], "memory": {}, "ingest": {}, "peers": {}, "checks": [], "notes": []}
        self.loadgen_proc = None
        atexit.register(self.cleanup)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        for binary in (settings["memgate_bin"], settings["loadgen_bin"]):
            if not os.access(binary, os.X_OK):
                sys.exit(f"not found or not executable: {binary} (build it, or set MEMGATE_BIN / LOADGEN_BIN)")
        self._write_bodies()
        self.watchdog = threading.Thread(target=self._watch_memory, name="rss-watchdog", daemon=True)
        self.watchdog.start()

    def _watch_memory(self):
        """The machine is shared: a server whose resident memory passes RSS_LIMIT_MB (default
        8000) is killed, and the run fails saying so, rather than pushing the machine into swap
        or the OOM killer. (A 10,000-line import request once took memgate past 13 GB.)"""
        limit = float(os.environ.get("RSS_LIMIT_MB", 8000))
        while True:
            for proc in list(self.procs.running):
                rss = proc.rss_mb()
                if rss > limit:
                    note = f"{proc.name} (pid {proc.pid}) killed: RSS {rss:.0f} MB over RSS_LIMIT_MB={limit:.0f}"
                    self.results["notes"].append(note)
                    say(note)
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(1)

    def _on_signal(self, signum, _frame):
        say(f"signal {signum}: stopping everything")
        sys.exit(130)

    def cleanup(self):
        if self.loadgen_proc and self.loadgen_proc.poll() is None:
            self.loadgen_proc.kill()
            self.loadgen_proc.wait()
        self.procs.stop_all()
        if os.environ.get("KEEP_WORK") == "1":
            say(f"kept {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.work, name)

    def _write_bodies(self):
        with open(self.path("small.json"), "w") as f:
            f.write(data.body("Where is my order 12345? It was due yesterday."))
        with open(self.path("small-stream.json"), "w") as f:
            f.write(data.body("Where is my order 12345? It was due yesterday.", stream=True))
        questions = data.warm_questions()
        with open(self.path("warm.jsonl"), "w") as f:
            f.write("\n".join(data.body(q) for q in questions) + "\n")
        with open(self.path("warm-stream.jsonl"), "w") as f:
            f.write("\n".join(data.body(q, stream=True) for q in questions) + "\n")
        with open(self.path("unique.json"), "w") as f:
            f.write(data.unique_template())

    # ----- processes ---------------------------------------------------------------------------

    def start_mock(self, record=True):
        # record=False: `--no-record`, the mock counts requests without keeping them (the soak:
        # a recording mock grows by every request, ~1-2 GB over 600,000).
        flags = [*MOCK_FLAGS] if record else [*MOCK_FLAGS, "--no-record"]
        proc = self.procs.spawn("mock", [self.s["memgate_bin"], "mock-upstream", "--listen", "127.0.0.1:0",
                                         *flags], cwd=REPO)
        self.procs.wait_listening(proc, "mock-upstream", timeout=30)
        self.mock = proc
        say(f"mock-upstream at {proc.url} (pid {proc.pid})")
        return proc

    def clear_mock(self):
        P.http("DELETE", self.mock.url + "/_mock/requests", timeout=30)

    def mock_requests(self):
        status, body = P.http_json("GET", self.mock.url + "/_mock/requests", timeout=60)
        return body.get("requests", []) if status == 200 and body else []

    def mock_count(self):
        """How many /v1/ requests the mock received since it was last cleared (kept or not)."""
        status, body = P.http_json("GET", self.mock.url + "/_mock/requests", timeout=60)
        return body.get("count", len(body.get("requests", []))) if status == 200 and body else 0

    def start_memgate(self, name, auth_mode, db_path=None):
        config = self.path(f"{name}.toml")
        # All load comes from one caller: lift the per-caller limit (600/min by default) so that
        # memgate's own 429s do not stand in for its latency; the admin limit too, for the import
        # and the readiness polls.
        with open(config, "w") as f:
            f.write(f'[auth]\nmode = "{auth_mode}"\nrate_limit_per_minute = 1000000000\n\n'
                    "[admin]\nrate_limit_per_minute = 1000000\n")
        env = dict(os.environ)
        env.update({
            "MEMGATE_DATABASE_URL": f"sqlite://{db_path or self.path(name + '.db')}",
            "MEMGATE_LOG_LEVEL": self.s["memgate_log_level"],
            "MEMGATE_ADMIN_TOKEN": self.admin_token,
            "ANTHROPIC_API_KEY": "sk-ant-bench-upstream",
        })
        env.pop("MEMGATE_REDIS_URL", None)
        started = time.monotonic()
        proc = self.procs.spawn(name, [self.s["memgate_bin"], "serve", "--config", config, "--listen",
                                       "127.0.0.1:0", "--upstream-url", self.mock.url, "--auth-mode",
                                       auth_mode], env=env, cwd=REPO)
        proc.db_path = db_path or self.path(name + ".db")
        self.procs.wait_listening(proc, "memgate", timeout=300)
        P.poll(f"{name} /readyz", lambda: P.http("GET", proc.url + "/readyz", timeout=5)[0] == 200, 60,
               proc=proc)
        proc.started_in = time.monotonic() - started
        say(f"{name} ({auth_mode}) at {proc.url} (pid {proc.pid}), ready in {proc.started_in:.1f} s, "
            f"RSS {proc.rss_mb():.0f} MB")
        return proc

    def admin(self, proc, method, path, payload=None, body=None, content_type=None, timeout=600):
        headers = {"authorization": f"Bearer {self.admin_token}"}
        if body is not None:
            headers["content-type"] = content_type or "application/json"
            status, raw = P.http(method, proc.url + "/admin/v1" + path, body, headers, timeout)
            try:
                return status, json.loads(raw)
            except ValueError:
                return status, {"raw": raw[:500].decode(errors="replace")}
        return P.http_json(method, proc.url + "/admin/v1" + path, payload, headers, timeout)

    def gateway_key(self, proc):
        status, answer = self.admin(proc, "POST", "/keys", {
            "name": "loadtest", "scopes": data.CALLER_SCOPES, "permissions": ["assert_subject"],
            "rate_limit_per_minute": 1000000000})
        if status != 201:
            raise P.StartError(f"creating a gateway key: {status} {answer}")
        return answer["key"]

    def import_records(self, proc, count):
        """Imports `count` generated records through POST /admin/v1/import, IMPORT_CHUNK (1,000)
        JSON Lines a request, and waits until every one has a stored embedding of the running
        model (findable by exact terms at once, by meaning once embedded). Returns the ingest
        figures.

        With IMPORT_PACED=1 (the default) the next request waits until the previous one's records
        are embedded. Unpaced, memgate (at fcce8c3) starts one background embedding task per
        import request, each over every record still missing a vector: the model then embeds the
        same records many times over, and resident memory grew past 8 GB at 43,000 records."""
        chunk = int(os.environ.get("IMPORT_CHUNK", 1000))
        paced = os.environ.get("IMPORT_PACED", "1") == "1"
        lines = data.records(count)
        t0 = time.monotonic()
        peak = proc.rss_mb()
        for start in range(0, len(lines), chunk):
            part = "\n".join(lines[start:start + chunk]) + "\n"
            status, answer = self.admin(proc, "POST", "/import", body=part, content_type="application/x-ndjson")
            if status != 201:
                raise P.StartError(f"import of lines {start + 1}-{start + chunk}: {status} "
                                   f"{json.dumps(answer)[:800]}")
            if paced:
                self.wait_embedded(proc, min(start + chunk, count), t0, quiet=True)
            peak = max(peak, proc.rss_mb())
            done = min(start + chunk, count)
            if paced and (start // chunk) % 10 == 9:
                elapsed = time.monotonic() - t0
                say(f"  {proc.name}: {done}/{count} imported and embedded after {elapsed:.0f} s "
                    f"({done / elapsed:.1f}/s), RSS {proc.rss_mb():.0f} MB")
        imported_s = time.monotonic() - t0
        say(f"{proc.name}: imported {count} records in {imported_s:.1f} s "
            f"({'paced' if paced else 'unpaced'}); waiting until every one is embedded")
        searchable_s = self.wait_embedded(proc, count, t0)
        figures = {"records": count, "chunk": chunk, "paced": paced, "import_requests_s": round(imported_s, 2),
                   "searchable_s": round(searchable_s, 1),
                   "records_per_s": round(count / searchable_s, 1) if searchable_s > 0 else None,
                   "rss_peak_mb": round(max(peak, proc.rss_mb()), 1), "loadavg_after": P.loadavg()}
        say(f"{proc.name}: {count} records searchable after {searchable_s:.1f} s "
            f"({figures['records_per_s']} records/s), peak RSS {figures['rss_peak_mb']:.0f} MB")
        return figures

    def embedded(self, proc):
        """(records with a stored embedding of the running model, active records) in the default
        tenant, read from the SQLite store (read-only). The store is the truth: the
        memgate_embedding_texts_total counter over-counts when several background embedding
        tasks embed the same records."""
        if not getattr(proc, "model_id", None):
            with open(proc.err_path, errors="replace") as f:
                text = re.sub(r"\x1b\[[0-9;]*m", "", f.read())
            match = re.search(r"embedding model loaded model_id=(\S+)", text)
            if not match:
                raise P.StartError(f"{proc.name}: no 'embedding model loaded model_id=' line in its log")
            proc.model_id = match.group(1)
        db = sqlite3.connect(f"file:{proc.db_path}?mode=ro", uri=True, timeout=30)
        try:
            (vectors,) = db.execute("SELECT count(*) FROM memory_embeddings WHERE tenant = 'default' AND "
                                    "model_id = ?", (proc.model_id,)).fetchone()
            (records,) = db.execute("SELECT count(*) FROM memories WHERE tenant = 'default' AND "
                                    "status = 'active'").fetchone()
        finally:
            db.close()
        return vectors, records

    def wait_embedded(self, proc, count, t0, quiet=False):
        """Polls the store until `count` records have their embedding. The deadline assumes at
        least 5 records/s."""
        last_report = [time.monotonic()]

        def done():
            vectors, _ = self.embedded(proc)
            if not quiet and time.monotonic() - last_report[0] > 60:
                elapsed = time.monotonic() - t0
                say(f"  {proc.name}: {vectors}/{count} embedded after {elapsed:.0f} s "
                    f"({vectors / elapsed:.1f}/s), RSS {proc.rss_mb():.0f} MB")
                last_report[0] = time.monotonic()
            return vectors >= count

        P.poll(f"{count} records embedded in {proc.name}", done, timeout=max(300, count / 5), interval=0.5,
               proc=proc)
        return time.monotonic() - t0

    def wait_all_embedded(self, proc):
        """For a store whose records were imported before (the records cache): ready once every
        active record has an embedding of the running model (memgate re-embeds them in the
        background when the model changed)."""
        _, records = self.embedded(proc)
        self.wait_embedded(proc, records, time.monotonic())

    def start_funnel(self, name, records):
        proc = self.start_memgate(name, "managed")
        idle = proc.rss_mb()
        key = self.gateway_key(proc)
        ingest = self.import_records(proc, records)
        self.results["memory"][name] = {"rss_idle_mb": round(idle, 1), "records": records,
                                        "rss_after_import_mb": round(proc.rss_mb(), 1)}
        self.results["ingest"][name] = ingest
        proc.key = key
        return proc

    def start_big(self):
        """memgate with RECORDS records in one tenant. With RECORDS_CACHE=1 (the default) the
        store of an earlier run with the same count is reused (loadtest/.cache/, git-ignored), so
        that only the first run pays the import; its ingest figures are kept beside it."""
        n = self.s["records"]
        cache_dir = os.path.join(LOADTEST, ".cache")
        cached = os.path.join(cache_dir, f"records-{n}.db")
        db = self.path("big.db")
        if self.s["records_cache"] and os.path.exists(cached):
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(cached + suffix):
                    shutil.copy(cached + suffix, db + suffix)
            with open(cached + ".json") as f:
                meta = json.load(f)
            proc = self.start_memgate("memgate-big", "managed", db_path=db)
            self.wait_all_embedded(proc)
            proc.key = self.gateway_key(proc)
            ingest = dict(meta["ingest"], from_cache=True, cached_at=meta["cached_at"])
            idle = None  # not measured: the store had its records before this process started
        else:
            proc = self.start_memgate("memgate-big", "managed", db_path=db)
            idle = proc.rss_mb()
            proc.key = self.gateway_key(proc)
            ingest = self.import_records(proc, n)
            if self.s["records_cache"]:
                self._save_cache(proc, db, cached, ingest, idle)
                proc = self.start_memgate("memgate-big", "managed", db_path=db)
                self.wait_all_embedded(proc)
                proc.key = self.gateway_key(proc)
        self.results["ingest"]["memgate-big"] = ingest
        self.results["memory"]["memgate-big"] = {
            "records": n, "rss_idle_mb": round(idle, 1) if idle else None,
            "rss_loaded_mb": round(proc.rss_mb(), 1), "started_in_s": round(proc.started_in, 1)}
        say(f"memgate-big: {n} records loaded, RSS {proc.rss_mb():.0f} MB")
        return proc

    def _save_cache(self, proc, db, cached, ingest, idle):
        """Stops memgate (a clean shutdown), keeps a copy of its store, and leaves the caller to
        start it again on the same store (which also measures a start with N records)."""
        self.procs.stop(proc)
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        with open(os.path.join(os.path.dirname(cached), ".gitignore"), "w") as f:
            f.write("*\n")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db + suffix):
                shutil.copy(db + suffix, cached + suffix)
        with open(cached + ".json", "w") as f:
            json.dump({"ingest": ingest, "rss_idle_mb": round(idle, 1),
                       "cached_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                       "commit": self.results["machine"]["commit"]}, f, indent=1)

    def start_nginx(self):
        port = P.free_port()
        prefix = self.path("nginx")
        os.makedirs(prefix, exist_ok=True)
        with open(os.path.join(LOADTEST, "peers", "nginx.conf.in")) as f:
            conf = f.read()
        conf = conf.replace("@PREFIX@", prefix).replace("@PORT@", str(port)).replace(
            "@UPSTREAM@", self.mock.url.removeprefix("http://"))
        with open(os.path.join(prefix, "nginx.conf"), "w") as f:
            f.write(conf)
        proc = self.procs.spawn("nginx", ["nginx", "-p", prefix, "-c", os.path.join(prefix, "nginx.conf"),
                                          "-e", os.path.join(prefix, "error.log"), "-g", "daemon off;"])
        proc.url = f"http://127.0.0.1:{port}"
        P.poll("nginx to proxy to the mock", lambda: P.http("GET", proc.url + "/v1/models", timeout=5)[0] == 200,
               30, proc=proc)
        version = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
        self.results["peers"]["nginx"] = {"version": version, "rss_idle_mb": round(proc.rss_mb(), 1)}
        say(f"nginx at {proc.url} ({version})")
        return proc

    def start_litellm(self):
        venv = os.path.join(LOADTEST, ".venv-litellm")
        port = P.free_port()
        with open(os.path.join(LOADTEST, "peers", "litellm.yaml.in")) as f:
            conf = f.read().replace("@UPSTREAM@", self.mock.url)
        config = self.path("litellm.yaml")
        with open(config, "w") as f:
            f.write(conf)
        env = dict(os.environ)
        # LiteLLM refuses to start without a master key (callers send it as x-api-key).
        self.litellm_key = "sk-" + secrets.token_hex(24)
        env.update({
            "LITELLM_MASTER_KEY": self.litellm_key,
            # No network: the model price list ships inside the package.
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOG": "ERROR",
            "LITELLM_TELEMETRY": "False",
            "NO_DOCS": "True",
        })
        proc = self.procs.spawn("litellm", [os.path.join(venv, "bin", "litellm"), "--config", config,
                                            "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"],
                                env=env, cwd=self.work)
        proc.url = f"http://127.0.0.1:{port}"
        P.poll("LiteLLM /health/liveliness",
               lambda: P.http("GET", proc.url + "/health/liveliness", timeout=5)[0] == 200, 180, interval=0.5,
               proc=proc)
        version = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                                  "import importlib.metadata as m; print(m.version('litellm'))"],
                                 capture_output=True, text=True).stdout.strip()
        self.results["peers"]["litellm"] = {"version": version, "rss_idle_mb": round(proc.rss_mb(), 1),
                                            "endpoint": "POST /v1/messages (model_list: anthropic/claude-mock-1, "
                                                        "api_base = the mock), master key as x-api-key"}
        say(f"LiteLLM {version} at {proc.url}")
        return proc

    # ----- load --------------------------------------------------------------------------------

    def loadgen(self, label, url, rate, duration, args, json_out=True):
        argv = [self.s["loadgen_bin"], "--label", label, "--url", url, "--rate", str(rate), "--duration",
                str(duration), "--header", "anthropic-version: 2023-06-01", *args]
        if json_out:
            argv.append("--json")
        self.loadgen_proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = self.loadgen_proc.communicate()
        status = self.loadgen_proc.returncode
        self.loadgen_proc = None
        if status != 0:
            raise RuntimeError(f"loadgen {label} exited {status}: {err.strip()}")
        return json.loads(out) if json_out else out

    def run(self, group, system, target, rate, **extra):
        """One scenario at one rate: a short unmeasured warm-up at the same rate, then the
        measured run. `target` = (server Proc, loadgen args)."""
        proc, args = target
        url = proc.url + "/v1/messages"
        before = P.loadavg()
        if self.s["warmup"] > 0:
            self.loadgen(f"{system} warm-up", url, rate, self.s["warmup"], args)
        counters = embedding_counters(proc.url) if system.startswith("funnel") else None
        if extra.get("count_upstream"):
            self.clear_mock()
        cpu = self.cpu_snapshot()
        result = self.loadgen(system, url, rate, self.s["duration"], args)
        result.update(group=group, system=system, rate=rate, load_before=before, load_after=P.loadavg(),
                      server_rss_mb=round(proc.rss_mb(), 1) if proc is not self.mock else None,
                      cpu=self.cpu_since(cpu, result["elapsed_s"], proc))
        if counters is not None:
            after = embedding_counters(proc.url)
            result["embedding"] = {k: after[k] - counters[k] for k in after}
        if extra.get("count_upstream"):
            result["upstream_seen"] = len(self.mock_requests())
        self.clear_mock()
        self.results["runs"].append(result)
        lat = result["latency_ms"]
        ttft = f", ttft p50 {result['ttft_ms']['p50']:.3f}" if "ttft_ms" in result else ""
        say(f"  {group:7} {system:22} {rate:>6} req/s: p50 {lat['p50']:8.3f} p99 {lat['p99']:9.3f} ms{ttft}, "
            f"{result['count']} ok, {result['errors']} errors, achieved {result['achieved_rate']:.0f}/s")
        self.save()
        return result

    def cpu_snapshot(self):
        ours = {p.name: P.cpu_seconds(p.pid) for p in self.procs.running}
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return P.busy_cpu_seconds(), ours, children.ru_utime + children.ru_stime

    def cpu_since(self, snapshot, wall, server):
        """Cores busy during a run: the server's, the mock's, loadgen's, and everything else's on
        the machine ("other": builds, tests, other engineers' work). A quiet run has other ~0."""
        busy0, ours0, children0 = snapshot
        busy, ours, _ = self.cpu_snapshot()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        loadgen = children.ru_utime + children.ru_stime - children0
        used = {name: ours[name] - ours0.get(name, 0) for name in ours}
        mine = sum(used.values()) + loadgen
        wall = max(wall, 1e-3)
        return {"server": round(used.get(server.name, 0) / wall, 3), "mock": round(used.get("mock", 0) / wall, 3),
                "loadgen": round(loadgen / wall, 3), "all_ours": round(mine / wall, 3),
                "other": round(max(0.0, busy - busy0 - mine) / wall, 3)}

    def save(self):
        self.results["finished_at"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        self.results["machine"]["loadavg_end"] = P.loadavg()
        with open(os.path.join(self.results_dir, "results.json"), "w") as f:
            json.dump(self.results, f, indent=1)

    def prime(self, proc, bodies_path):
        """Sends each warm question once, one at a time, until memgate answered every one with
        `X-Memory-Status: ok`: its query embedding is then in memgate's cache. The warm-up alone
        is not enough on a busy machine: a query whose embedding overruns the memory budget
        (50 ms) is answered `degraded`, and its vector is dropped with the request, not cached,
        so the same question misses again next time."""
        with open(bodies_path) as f:
            bodies = [line for line in f.read().splitlines() if line.strip()]
        headers = {"content-type": "application/json", "anthropic-version": "2023-06-01",
                   "x-api-key": proc.key, "x-memory-subject": data.SUBJECT}
        pending = list(bodies)
        for _ in range(20):
            failed = []
            for body in pending:
                request = urllib.request.Request(proc.url + "/v1/messages", data=body.encode(), headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        response.read()
                        if response.headers.get("x-memory-status") != "ok":
                            failed.append(body)
                except OSError:
                    failed.append(body)
            if not failed:
                break
            pending = failed
        else:
            raise P.StartError(f"{len(pending)} warm questions still not answered with memory ok after 20 rounds")
        say(f"{proc.name}: {len(bodies)} warm questions primed in memgate's query cache")

    def smoke(self, name, proc, args, expect_upstream=True):
        """One request through a system before its runs: a 2xx answer, and the mock saw it."""
        self.clear_mock()
        result = self.loadgen(f"{name} smoke", proc.url + "/v1/messages", 1, 1, args)
        seen = self.mock_requests()
        saw = max(len(seen), self.mock_count())  # a --no-record mock only counts
        reached = any(r.get("path") == "/v1/messages" for r in seen) or (not seen and saw == 1)
        ok = result["count"] == 1 and (not expect_upstream or reached)
        check = {"system": name, "ok": ok, "answered_2xx": result["count"], "mock_saw": saw,
                 "statuses": result["error_statuses"], "headers": result["header_counts"]}
        self.results["checks"].append(check)
        self.clear_mock()
        if not ok:
            raise P.StartError(f"smoke test of {name} failed: {check}; {result.get('first_transport_error')}")
        say(f"smoke {name}: ok (mock saw {saw} request(s)) {result['header_counts'] or ''}")

    # ----- the scenarios -----------------------------------------------------------------------

    def targets(self, mock, nginx=None, passthrough=None, funnel=None):
        key = ["--header", "x-api-key: sk-ant-bench-caller"]
        small = ["--body-file", self.path("small.json"), *key]
        stream = ["--body-file", self.path("small-stream.json"), "--ttft", *key]
        memory = ["--count-header", "x-memory-status", "--count-header", "x-memory-injected"]
        t = {"direct": (mock, small), "direct-stream": (mock, stream)}
        if nginx:
            t["nginx"] = (nginx, small)
            t["nginx-stream"] = (nginx, stream)
        if passthrough:
            t["memgate-pass"] = (passthrough, small + memory)
            t["memgate-pass-stream"] = (passthrough, stream + memory)
        if funnel:
            fkey = ["--header", f"x-api-key: {funnel.key}", "--header", f"x-memory-subject: {data.SUBJECT}"]
            t["funnel-warm"] = (funnel, ["--body-lines", self.path("warm.jsonl"), *fkey, *memory])
            t["funnel-warm-stream"] = (funnel, ["--body-lines", self.path("warm-stream.jsonl"), "--ttft",
                                                *fkey, *memory])
            t["funnel-new"] = (funnel, ["--body-file", self.path("unique.json"), "--unique", *fkey, *memory])
        return t

    def full(self):
        s = self.s
        groups = s["groups"]
        mock = self.start_mock()
        memgate_groups = {"sweep", "stream", "newq"} & set(groups)
        if memgate_groups:
            nginx = self.start_nginx() if {"sweep", "stream"} & set(groups) else None
            passthrough = self.start_memgate("memgate-pass", "passthrough")
            self.results["memory"]["memgate-pass"] = {"rss_idle_mb": round(passthrough.rss_mb(), 1),
                                                      "records": 0,
                                                      "started_in_s": round(passthrough.started_in, 1)}
            funnel = self.start_funnel("memgate-funnel", s["funnel_records"])
            t = self.targets(mock, nginx, passthrough, funnel)
            self.prime(funnel, self.path("warm.jsonl"))
            for name in ("direct", "nginx", "memgate-pass", "funnel-warm", "funnel-warm-stream"):
                if name in t:
                    self.smoke(name, *t[name])
            if "sweep" in groups:
                say("group sweep: direct, nginx, memgate pass-through, memgate funnel (warm), per rate")
                for rate in s["rates"]:
                    for system in ("direct", "nginx", "memgate-pass", "funnel-warm"):
                        self.run("sweep", system, t[system], rate)
            if "stream" in groups:
                say("group stream: time to first token, per rate")
                for rate in s["stream_rates"]:
                    for system in ("direct-stream", "nginx-stream", "memgate-pass-stream", "funnel-warm-stream"):
                        self.run("stream", system, t[system], rate)
            if "newq" in groups:
                say("group newq: every question new (the model embeds every query)")
                for rate in s["newq_rates"]:
                    self.run("newq", "direct", t["direct"], rate)
                    self.run("newq", "funnel-new", t["funnel-new"], rate)
            for name in ("memgate-pass", "memgate-funnel"):
                proc = passthrough if name == "memgate-pass" else funnel
                self.results["memory"][name].update(rss_end_mb=round(proc.rss_mb(), 1),
                                                    hwm_mb=round(P.hwm_kb(proc.pid) / 1024, 1))
            if nginx:
                self.results["peers"]["nginx"]["rss_end_mb"] = round(nginx.rss_mb(), 1)
                self.procs.stop(nginx)
            self.procs.stop(passthrough)
            self.procs.stop(funnel)
        if "litellm" in groups:
            litellm = self.start_litellm()
            t = self.targets(mock)
            target = (litellm, ["--body-file", self.path("small.json"), "--header",
                                f"x-api-key: {self.litellm_key}"])
            self.smoke("litellm", *target)
            say("group litellm: direct and LiteLLM, per rate")
            for rate in s["litellm_rates"]:
                self.run("litellm", "direct", t["direct"], rate)
                self.run("litellm", "litellm", target, rate, count_upstream=True)
            self.results["peers"]["litellm"]["rss_end_mb"] = round(litellm.rss_mb(), 1)
            self.procs.stop(litellm)
        if "big" in groups:
            big = self.start_big()
            t = self.targets(mock, funnel=big)
            self.prime(big, self.path("warm.jsonl"))
            self.smoke("funnel-big", *t["funnel-warm"])
            say(f"group big: direct and memgate funnel (warm) with {s['records']} records, per rate")
            for rate in s["big_rates"]:
                self.run("big", "direct", t["direct"], rate)
                self.run("big", "funnel-big", t["funnel-warm"], rate)
            self.results["memory"]["memgate-big"].update(rss_end_mb=round(big.rss_mb(), 1),
                                                         hwm_mb=round(P.hwm_kb(big.pid) / 1024, 1))
            self.procs.stop(big)
        self.save()

    def prepare(self):
        """Only builds the records cache for `big` (and measures the ingest on the way)."""
        self.start_mock()
        self.s["records_cache"] = True
        cached = os.path.join(LOADTEST, ".cache", f"records-{self.s['records']}.db")
        if os.path.exists(cached):
            say(f"{cached} exists; remove it to measure the import again")
            return
        self.start_big()
        self.save()

    def soak(self):
        s = self.s
        self.start_mock(record=False)
        funnel = self.start_funnel("memgate-funnel", s["funnel_records"])
        t = self.targets(self.mock, funnel=funnel)["funnel-warm"]
        self.prime(funnel, self.path("warm.jsonl"))
        self.smoke("funnel-warm", *t)
        self.loadgen("soak warm-up", funnel.url + "/v1/messages", s["soak_rate"], max(s["warmup"], 5), t[1])
        csv_path = os.path.join(self.results_dir, "soak-rss.csv")
        stop = threading.Event()
        samples = []

        def sample():
            # RSS every SOAK_SAMPLE s. The mock runs with --no-record: a recording mock grew by
            # ~1-2 GB over 600,000 requests, and clearing it every 30 s stalled it for up to
            # ~0.8 s (loadtest/results/experiments/soak-mock-cleared-every-30s.json).
            t0 = time.monotonic()
            with open(csv_path, "w") as f:
                f.write("t_s,memgate_rss_mb,memgate_hwm_mb,mock_rss_mb,load1\n")
                while not stop.is_set():
                    now = time.monotonic()
                    row = (round(now - t0, 1), round(funnel.rss_mb(), 1), round(P.hwm_kb(funnel.pid) / 1024, 1),
                           round(self.mock.rss_mb(), 1), P.loadavg()[0])
                    samples.append(row)
                    f.write(",".join(str(x) for x in row) + "\n")
                    f.flush()
                    stop.wait(s["soak_sample"])

        sampler = threading.Thread(target=sample, name="rss-sampler", daemon=True)
        say(f"soak: {s['soak_rate']:.0f} req/s for {s['soak_seconds']:.0f} s through the funnel, RSS every "
            f"{s['soak_sample']:.0f} s into {csv_path}")
        before = embedding_counters(funnel.url)
        self.clear_mock()
        sampler.start()
        try:
            result = self.loadgen("soak", funnel.url + "/v1/messages", s["soak_rate"], s["soak_seconds"],
                                  [*t[1], "--window", "10"])
        finally:
            stop.set()
            sampler.join()
        after = embedding_counters(funnel.url)
        result.update(group="soak", system="funnel-warm", rate=s["soak_rate"], upstream_seen=self.mock_count(),
                      embedding={k: after[k] - before[k] for k in after})
        self.results["runs"].append(result)
        self.results["soak"] = report.judge_soak(result, samples, s)
        self.results["memory"]["memgate-funnel"]["rss_end_mb"] = round(funnel.rss_mb(), 1)
        verdict = self.results["soak"]
        say(f"soak: {'PASS' if verdict['pass'] else 'FAIL'}: {verdict['summary']}")
        self.save()


    def profile(self):
        """Where memgate's CPU goes per request: pass-through and the funnel with warm query
        embeddings (FUNNEL_RECORDS records; PROFILE_TENANT=big: RECORDS records instead), each at
        PROFILE_RATE (500) req/s for DURATION (15) s
        with `perf record` (PROFILE_HZ samples/s, DWARF call graphs) attached to memgate. Writes
        the CPU per request and the hottest functions (self and inclusive) into
        loadtest/results/profile/; the perf.data files stay in the temp dir (KEEP_WORK=1)."""
        s = self.s
        perf = shutil.which("perf")
        self.start_mock(record=False)
        if os.environ.get("PROFILE_TENANT") == "big":
            # PROFILE_TENANT=big: the funnel with warm questions over RECORDS records (the cache
            # that `prepare` makes), instead of pass-through and FUNNEL_RECORDS.
            big = self.start_big()
            t = self.targets(self.mock, funnel=big)
            t["funnel-big"] = t["funnel-warm"]
            self.prime(big, self.path("warm.jsonl"))
            systems = (("funnel-big", big),)
        else:
            passthrough = self.start_memgate("memgate-pass", "passthrough")
            funnel = self.start_funnel("memgate-funnel", s["funnel_records"])
            t = self.targets(self.mock, passthrough=passthrough, funnel=funnel)
            self.prime(funnel, self.path("warm.jsonl"))
            systems = (("memgate-pass", passthrough), ("funnel-warm", funnel))
        self.results["profiles"] = {}
        for system, proc in systems:
            self.smoke(system, *t[system])
            url = proc.url + "/v1/messages"
            rate = s["profile_rate"]
            self.loadgen(f"{system} warm-up", url, rate, s["warmup"], t[system][1])
            data_path = self.path(f"{system}.perf.data")
            recorder = None
            if perf:
                recorder = subprocess.Popen([perf, "record", "-F", str(s["profile_hz"]), "--call-graph",
                                             "dwarf,8192", "-p", str(proc.pid), "-o", data_path],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            cpu = self.cpu_snapshot()
            try:
                result = self.loadgen(system, url, rate, s["duration"], t[system][1])
            finally:
                if recorder:
                    recorder.send_signal(signal.SIGINT)
                    recorder.wait(timeout=120)
            result.update(group="profile", system=system, rate=rate, load_before=None, load_after=P.loadavg(),
                          cpu=self.cpu_since(cpu, result["elapsed_s"], proc))
            self.results["runs"].append(result)
            us = result["cpu"]["server"] / max(result["achieved_rate"], 1e-9) * 1e6
            entry = {"rate": rate, "server_cores": result["cpu"]["server"], "cpu_us_per_request": round(us, 1),
                     "other_cpu": result["cpu"]["other"], "p50_ms": result["latency_ms"]["p50"],
                     "p99_ms": result["latency_ms"]["p99"], "errors": result["errors"]}
            if perf:
                for kind, flags in (("self", ["--no-children"]), ("inclusive", ["--children"])):
                    out = subprocess.run([perf, "report", "-i", data_path, "--stdio", "--no-inline", "-g", "none",
                                          "--sort", "symbol", "--percent-limit", "0.7", *flags],
                                         capture_output=True, text=True, timeout=900).stdout
                    out = tidy_perf_report(out)
                    path = os.path.join(self.results_dir, f"{system}-{kind}.txt")
                    with open(path, "w") as f:
                        f.write(out)
                    entry[f"top_{kind}"] = os.path.relpath(path, REPO)
            self.results["profiles"][system] = entry
            say(f"profile {system}: {us:.0f} µs CPU per request at {rate:.0f}/s (other CPU "
                f"{result['cpu']['other']:.2f} cores), p99 {result['latency_ms']['p99']:.2f} ms")
            self.save()


def tidy_perf_report(text):
    """perf's --stdio table pads every row to its longest (Rust) symbol and appends empty IPC
    columns: keep the figures, one row per line, without the padding."""
    rows = []
    for line in text.splitlines():
        line = re.sub(r"\s+-\s+-\s*$", "", line).rstrip()
        if line.startswith("# ....") or line.startswith("# Overhead"):
            continue
        rows.append(re.sub(r"  +", "  ", line.strip()) if not line.startswith("#") else line)
    return "\n".join(rows) + "\n"


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("quick", "full", "soak", "prepare", "report", "profile"):
        sys.exit(__doc__)
    mode = sys.argv[1]
    if mode == "report":
        report.write_all(REPO)
        return
    bench = Bench(settings_for(mode))
    say(f"mode {mode}; machine {bench.results['machine']}; work dir {bench.work}")
    try:
        getattr(bench, {"quick": "full"}.get(mode, mode))()
    except P.StartError as err:
        bench.results["notes"].append(f"stopped: {err}")
        bench.save()
        say(f"FAILED: {err}")
        sys.exit(1)
    if mode in ("quick", "full", "soak"):
        default = os.path.join(LOADTEST, "results", mode)
        own = mode == "quick" or os.path.abspath(bench.results_dir) != os.path.abspath(default)
        report.write_all(REPO, bench.results_dir if own else None)


if __name__ == "__main__":
    main()
