#!/usr/bin/env python3
"""Does an import stall the requests served beside it? A tenant's large scope gets an approximate
index (IVF) at 8,192 records and a new one each time it doubles; that build is seconds of k-means
at tens of thousands of records. This imports `--records` public records with their vectors into
one tenant (so nothing is embedded: the import is the index's work alone), `--chunk` lines a
request, while one process of its own asks, one request after another:

- `acme`: a Messages request of the importing tenant, whose memory the funnel searches;
- `other`: a Messages request of another tenant, with no records (pass-through);
- `/healthz`.

It reports each kind's latencies during the import (p50, p99, max, how many took over 100 ms).

    python3 loadtest/harness/import_stall.py                       # needs target/release/memgate
    MEMGATE_BIN=… python3 loadtest/harness/import_stall.py --records 70000 --json=PATH

Build first (`cargo build --release --bin memgate`) and `source .assets/env.sh` (the model). The
vectors are random unit vectors (the build's cost does not depend on what they mean), made once
and cached in loadtest/.cache/.
"""

import argparse
import base64
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from procs import Procs, http, http_json  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEMGATE = os.environ.get("MEMGATE_BIN") or os.path.join(
    REPO, os.environ.get("CARGO_TARGET_DIR", "target"), "release", "memgate")
CACHE = os.path.join(REPO, "loadtest", ".cache")
ADMIN = "import-stall-admin-token"
DIMS = 384

# Asks each (name, url, key, body) in turn until a line arrives on stdin, then prints
# {name: [[started, status, seconds], ...]}; one connection per request, as a fresh client.
PROBER = """
import http.client, json, sys, threading, time, urllib.parse
targets = json.loads(sys.argv[1])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
seen = {t["name"]: [] for t in targets}
while not stop.is_set():
    for t in targets:
        url = urllib.parse.urlparse(t["url"])
        started = time.monotonic()
        try:
            c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
            headers = {"content-type": "application/json"}
            if t.get("key"):
                headers["x-api-key"] = t["key"]
            c.request("POST" if t.get("body") else "GET", url.path, body=t.get("body"), headers=headers)
            response = c.getresponse()
            response.read()
            status = response.status
            c.close()
        except OSError:
            status = 0
        seen[t["name"]].append((started, status, time.monotonic() - started))
    time.sleep(0.005)
print(json.dumps(seen))
"""


def vectors_file(records, model):
    """The import's lines, cached: `records` public facts with random unit vectors of `model`."""
    path = os.path.join(CACHE, f"import-stall-{records}-{re.sub(r'[^A-Za-z0-9]', '_', model)[:60]}.jsonl")
    if os.path.exists(path):
        return path
    os.makedirs(CACHE, exist_ok=True)
    rng = random.Random(24)
    with open(path + ".tmp", "w") as f:
        for i in range(records):
            v = [b - 128 for b in rng.randbytes(DIMS)]
            norm = sum(x * x for x in v) ** 0.5 or 1.0
            vector = base64.b64encode(struct.pack(f"<{DIMS}f", *(x / norm for x in v))).decode()
            line = {"id": f"kb-{i:07d}", "type": "fact", "scope": ["public"],
                    "content": {"statement": f"Knowledge-base article {i}: parcels to region {i % 97} "
                                             f"leave the warehouse on weekday {i % 5}."},
                    "embedding": {"model": model, "vector": vector}}
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
    os.replace(path + ".tmp", path)
    return path


def summary(samples, since, until):
    times = sorted(seconds * 1000 for started, status, seconds in samples if since <= started <= until)
    failed = sum(1 for started, status, _ in samples if since <= started <= until and status != 200)
    if not times:
        return {"requests": 0}

    def pct(p):
        return round(times[min(len(times) - 1, int(round(p / 100 * (len(times) - 1))))], 1)

    return {"requests": len(times), "failed": failed, "p50_ms": pct(50), "p99_ms": pct(99),
            "max_ms": round(times[-1], 1), "over_100_ms": sum(1 for t in times if t > 100)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=70_000)
    parser.add_argument("--chunk", type=int, default=5_000)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="memgate-import-stall.")
    procs = Procs(work)
    figures = {"binary": MEMGATE, "records": args.records, "chunk": args.chunk}
    try:
        mock = procs.spawn("mock", ["nice", "-n", "19", MEMGATE, "mock-upstream", "--listen", "127.0.0.1:0",
                                    "--no-record"], cwd=REPO)
        mock_url = procs.wait_listening(mock, "mock-upstream")
        config = os.path.join(work, "memgate.toml")
        with open(config, "w") as f:
            f.write('[auth]\nmode = "managed"\nrate_limit_per_minute = 1000000000\n'
                    '[admin]\nrate_limit_per_minute = 1000000\n')
        env = dict(os.environ, ANTHROPIC_API_KEY="sk-ant-bench", MEMGATE_ADMIN_TOKEN=ADMIN,
                   MEMGATE_LOG_LEVEL="warn,memgate=info")
        env.pop("MEMGATE_REDIS_URL", None)
        gateway = procs.spawn("memgate", [MEMGATE, "serve", "--config", config, "--listen", "127.0.0.1:0",
                                          "--upstream-url", mock_url,
                                          "--database-url", f"sqlite://{work}/memgate.db"], env=env, cwd=REPO)
        url = procs.wait_listening(gateway, "memgate")
        with open(gateway.err_path, errors="replace") as f:
            model = re.search(r"embedding model loaded model_id=(\S+)", re.sub(r"\x1b\[[0-9;]*m", "", f.read())).group(1)
        lines = vectors_file(args.records, model)

        def admin(tenant):
            return {"authorization": f"Bearer {ADMIN}", "content-type": "application/json", "x-memory-tenant": tenant}

        keys = {}
        for tenant in ("acme", "other"):
            status, key = http_json("POST", f"{url}/admin/v1/keys", {"name": "probe", "scopes": ["public"]}, admin(tenant))
            assert status == 201, (status, key)
            keys[tenant] = key["key"]
        question = json.dumps({"model": "claude-test", "max_tokens": 16, "messages": [
            {"role": "user", "content": "When do parcels to region 12 leave the warehouse?"}]})
        targets = [{"name": "acme", "url": f"{url}/v1/messages", "key": keys["acme"], "body": question},
                   {"name": "other", "url": f"{url}/v1/messages", "key": keys["other"], "body": question},
                   {"name": "healthz", "url": f"{url}/healthz"}]
        prober = subprocess.Popen([sys.executable, "-c", PROBER, json.dumps(targets)], stdout=subprocess.PIPE,
                                  stdin=subprocess.PIPE, text=True)
        time.sleep(1.0)  # the prober's first round before the import: its baseline
        with open(lines) as f:
            all_lines = f.readlines()
        started = time.monotonic()
        imports = []
        for at in range(0, len(all_lines), args.chunk):
            body = "".join(all_lines[at:at + args.chunk]).encode()
            headers = {"authorization": f"Bearer {ADMIN}", "content-type": "application/x-ndjson",
                       "x-memory-tenant": "acme"}
            t0 = time.monotonic()
            status, raw = http("POST", f"{url}/admin/v1/import", body, headers, timeout=600)
            assert status == 201, (status, raw[:400])
            imports.append(round(time.monotonic() - t0, 2))
        ended = time.monotonic()
        time.sleep(1.0)
        out, _ = prober.communicate("stop\n")
        seen = json.loads(out)
        figures["import_s"] = round(ended - started, 1)
        figures["import_requests_s"] = imports
        figures["during_import"] = {name: summary(samples, started, ended) for name, samples in seen.items()}
        figures["rss_mb_after"] = round(gateway.rss_mb())
        # And once whatever the import set going has finished (a build it made due, the
        # allocator's own deferred frees).
        time.sleep(10)
        figures["rss_mb_settled"] = round(gateway.rss_mb())
    finally:
        procs.stop_all()
    print(json.dumps(figures, indent=1))
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
