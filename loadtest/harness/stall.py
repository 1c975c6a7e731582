#!/usr/bin/env python3
"""Can one request stall the gateway? (the second hardening round: a 32 MiB body of `"<a"` costs
less than a second of CPU, `/healthz` answers within 50 ms while ten such requests run, and four
connections that declare 32 MiB and send nothing do not delay a normal request).

One memgate (managed keys, one public record so every request's text is read for the person's
words) in front of the mock upstream:

1. the CPU time memgate's process spends on one 32 MiB `"<a<a…"` request (from /proc, user and
   system), best of three;
2. ten such requests at once, while `/healthz` is asked every 10 ms: its latencies;
3. four raw connections that declare a 32 MiB body and send none of it, then normal requests:
   their latencies beside the same requests without the idle connections.

    python3 loadtest/harness/stall.py            # needs target/release/memgate
    python3 loadtest/harness/stall.py --json=PATH
    MEMGATE_BIN=target/debug/memgate python3 loadtest/harness/stall.py   # another binary

Build first (`cargo build --release --bin memgate`) and `source .assets/env.sh` (the model).
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from procs import Procs, cpu_seconds, http, http_json  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEMGATE = os.environ.get("MEMGATE_BIN") or os.path.join(
    REPO, os.environ.get("CARGO_TARGET_DIR", "target"), "release", "memgate")
ADMIN = "stall-admin-token"
BODY_BYTES = 32_000_000


def flood():
    """A Messages request of about 32 MB: a first user turn of `"<a"` repeated, then a question."""
    text = "<a" * ((BODY_BYTES - 400) // 2)
    return json.dumps({"model": "claude-test", "max_tokens": 16, "messages": [
        {"role": "user", "content": text},
        {"role": "assistant", "content": "I see a lot of tags."},
        {"role": "user", "content": "What is your refund policy for orders delivered last week?"}]}).encode()


def small():
    return json.dumps({"model": "claude-test", "max_tokens": 16, "messages": [
        {"role": "user", "content": "What is your refund policy for orders delivered last week?"}]}).encode()


def post(url, key, body, timeout=300):
    """(status, seconds, X-Memory-Injected) of one Messages request."""
    request = urllib.request.Request(f"{url}/v1/messages", data=body, method="POST", headers={
        "x-api-key": key, "content-type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read()
            return answer.status, time.monotonic() - started, answer.headers.get("x-memory-injected")
    except urllib.error.HTTPError as refused:
        return refused.code, time.monotonic() - started, None


# Asks the URL every 10 ms until a line arrives on stdin, then prints [[status, seconds], ...].
PROBER = """
import http.client, json, sys, threading, time, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
seen = []
while not stop.is_set():
    started = time.monotonic()
    try:
        c = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        c.request("GET", url.path)
        status = c.getresponse().status
        c.close()
    except OSError:
        status = 0
    seen.append((status, time.monotonic() - started))
    time.sleep(0.01)
print(json.dumps(seen))
"""


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    json_path = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--json=")), None)
    work = tempfile.mkdtemp(prefix="memgate-stall.")
    procs = Procs(work)
    figures = {}
    try:
        # The mock stands for Anthropic, which runs elsewhere: niced, so its parsing of ten 32 MB
        # bodies does not take the cores from memgate.
        mock = procs.spawn("mock", ["nice", "-n", "19", MEMGATE, "mock-upstream", "--listen", "127.0.0.1:0", "--no-record"], cwd=REPO)
        mock_url = procs.wait_listening(mock, "mock-upstream")
        config = os.path.join(work, "memgate.toml")
        with open(config, "w") as f:
            # A funnel budget long enough that every flood is read to the end: the CPU measured is
            # all the work a request can cause, not what a timeout cut short.
            f.write('[auth]\nmode = "managed"\nrate_limit_per_minute = 1000000000\n'
                    '[memory]\nfunnel_timeout_ms = 30000\n'
                    # Room for ten 32 MB bodies from one address at once (each counted twice).
                    '[limits]\nmax_inflight_body_bytes = 1073741824\n'
                    'max_inflight_body_bytes_per_address = 1073741824\n'
                    'max_inflight_body_bytes_per_caller = 1073741824\n')
        env = dict(os.environ, ANTHROPIC_API_KEY="sk-ant-bench", MEMGATE_ADMIN_TOKEN=ADMIN, MEMGATE_LOG_LEVEL="warn")
        gateway = procs.spawn("memgate", [MEMGATE, "serve", "--config", config, "--listen", "127.0.0.1:0",
                                          "--upstream-url", mock_url,
                                          "--database-url", f"sqlite://{work}/memgate.db"], env=env, cwd=REPO)
        url = procs.wait_listening(gateway, "memgate")
        admin = {"authorization": f"Bearer {ADMIN}", "content-type": "application/json"}
        record = {"type": "fact", "scope": ["public"], "key": "refund-policy",
                  "content": {"statement": "Refunds within 30 days of delivery, our refund policy."}}
        status, _ = http_json("POST", f"{url}/admin/v1/memories", record, admin)
        assert status == 201, status
        status, key = http_json("POST", f"{url}/admin/v1/keys", {"name": "bench", "scopes": ["public"]}, admin)
        assert status == 201, status
        key = key["key"]
        body = flood()
        post(url, key, small())

        # 1. CPU per flood request.
        costs = []
        for _ in range(3):
            before = cpu_seconds(gateway.pid)
            status, _, injected = post(url, key, body)
            assert status == 200 and injected == "1", (status, injected)
            costs.append(cpu_seconds(gateway.pid) - before)
        figures["cpu_s_per_32mib_flood"] = min(costs)

        # 2. Ten at once, /healthz every 10 ms, asked by a process of its own (the ten senders'
        # threads share one interpreter lock; the prober must not wait on it).
        prober = subprocess.Popen([sys.executable, "-c", PROBER, f"{url}/healthz"], stdout=subprocess.PIPE,
                                  stdin=subprocess.PIPE, text=True)
        results = []
        workers = [threading.Thread(target=lambda: results.append(post(url, key, body))) for _ in range(10)]
        started = time.monotonic()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        figures["ten_floods_wall_s"] = time.monotonic() - started
        out, _ = prober.communicate("stop\n")
        health = json.loads(out)
        latencies = [t * 1000 for status, t in health if status == 200]
        figures["ten_floods_answers"] = {str(s): sum(1 for r in results if r[0] == s) for s in {r[0] for r in results}}
        figures["ten_floods_injected"] = sum(1 for r in results if r[2] == "1")
        figures["healthz_during"] = {"probes": len(health), "ok": len(latencies),
                                     "p50_ms": percentile(latencies, 50), "p99_ms": percentile(latencies, 99),
                                     "max_ms": max(latencies)}

        # 3. Four idle connections declaring 32 MiB, then normal requests.
        def normal_latencies(n=50):
            return [post(url, key, small())[1] * 1000 for _ in range(n)]

        alone = normal_latencies()
        host = url.removeprefix("http://")
        idle = []
        for _ in range(4):
            name, port = host.rsplit(":", 1)
            s = socket.create_connection((name, int(port)))
            s.sendall((f"POST /v1/messages HTTP/1.1\r\nhost: {host}\r\nx-api-key: {key}\r\n"
                       f"content-type: application/json\r\ncontent-length: {32 << 20}\r\n\r\n").encode())
            idle.append(s)
        beside = normal_latencies()
        for s in idle:
            s.close()
        figures["normal_request_ms"] = {"alone_p50": percentile(alone, 50), "alone_max": max(alone),
                                        "beside_4_idle_p50": percentile(beside, 50),
                                        "beside_4_idle_max": max(beside)}
    finally:
        procs.stop_all()
    print(json.dumps(figures, indent=1))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
