#!/usr/bin/env python3
"""What a firing trigger adds to a request (p99 added ≤ 1 ms at 100 requests/s).

Two memgates in front of the same mock upstream, identical but for `[triggers] enabled`, each
with the seed's escalation SOP and a support key that may see it, take the same open-loop load:
a message that meets the SOP's condition ("I'm going to talk to my lawyer"). With triggers on,
every request evaluates the conditions, decides two actions and hands them to the outbox's writer
(the same turn, so after the first the insert finds them there — the work a request adds, not the
deliveries); with triggers off, none of that runs. The difference of the two latency
distributions is what triggers cost the answer. Delivery itself is measured by
`cargo test --test integration -- --ignored --nocapture triggers::measure` (docs/triggers.md).

    python3 loadtest/harness/triggers_cost.py [RATE] [SECONDS]     # defaults: 100, 30

Needs the release binaries (`cargo build --release --bin memgate --example loadgen`) and the
model (`source .assets/env.sh`). Prints a table; `--json PATH` also writes the figures.
"""

import http.server
import subprocess
import json
import os
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from procs import Procs, http_json  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEMGATE = os.path.join(REPO, os.environ.get("CARGO_TARGET_DIR", "target"), "release", "memgate")
LOADGEN = os.path.join(REPO, os.environ.get("CARGO_TARGET_DIR", "target"), "release", "examples", "loadgen")
ADMIN = "triggers-cost-admin-token"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


class Receiver(http.server.BaseHTTPRequestHandler):
    """Answers every webhook 200 and counts it."""

    count = 0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        Receiver.count += 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def gateway(procs, work, name, mock_url, hook_url, enabled):
    config = os.path.join(work, f"{name}.toml")
    with open(config, "w") as f:
        f.write(
            f'[auth]\nmode = "managed"\nrate_limit_per_minute = 1000000000\n'
            f"[triggers]\nenabled = {'true' if enabled else 'false'}\n"
            f'[triggers.endpoints.ticketing]\nurl = "{hook_url}"\nsecrets = ["{SECRET}"]\nallow_private = true\n'
            f'[triggers.endpoints.ops_chat]\nurl = "{hook_url}"\nsecrets = ["{SECRET}"]\nallow_private = true\n'
        )
    env = dict(os.environ, ANTHROPIC_API_KEY="sk-ant-bench", MEMGATE_ADMIN_TOKEN=ADMIN, MEMGATE_LOG_LEVEL="warn")
    proc = procs.spawn(name, [MEMGATE, "serve", "--config", config, "--listen", "127.0.0.1:0",
                              "--upstream-url", mock_url,
                              "--database-url", f"sqlite://{work}/{name}.db"], env=env, cwd=REPO)
    url = procs.wait_listening(proc, "memgate")
    headers = {"authorization": f"Bearer {ADMIN}", "content-type": "application/json"}
    sop = {"id": "sop-escalation", "type": "internal_sop", "scope": ["team:support"], "content": {
        "process_name": "customer complaint escalation",
        "trigger_conditions": ["satisfaction_score < 2", "mentions lawyer or sue"],
        "actions": [{"service": "ticketing", "method": "create_ticket", "params": {"priority": "urgent"}},
                    {"service": "ops_chat", "method": "post_message", "params": {"channel": "#escalations"}}]}}
    status, _ = http_json("POST", f"{url}/admin/v1/memories", sop, headers)
    assert status == 201, status
    status, key = http_json("POST", f"{url}/admin/v1/keys", {"name": "support", "scopes": ["team:support"]}, headers)
    assert status == 201, status
    return url, key["key"]


def load(procs, work, label, url, key, rate, seconds):
    body = os.path.join(work, "body.json")
    with open(body, "w") as f:
        json.dump({"model": "claude-sonnet-4-5", "max_tokens": 32,
                   "messages": [{"role": "user", "content": "I'm going to talk to my lawyer about this order"}]}, f)
    out = os.path.join(work, f"{label}.json")
    argv = [LOADGEN, "--label", label, "--url", f"{url}/v1/messages", "--rate", str(rate),
            "--duration", str(seconds), "--body-file", body, "--header", f"x-api-key: {key}",
            "--count-header", "x-memory-triggered", "--json"]
    with open(out, "w") as f:
        subprocess.run(argv, stdout=f, check=True)
    with open(out) as f:
        return json.load(f)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--json")]
    json_path = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--json=")), None)
    rate = float(args[0]) if args else 100.0
    seconds = float(args[1]) if len(args) > 1 else 30.0
    work = tempfile.mkdtemp(prefix="memgate-triggers-cost.")
    procs = Procs(work)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        mock = procs.spawn("mock", [MEMGATE, "mock-upstream", "--listen", "127.0.0.1:0", "--no-record"], cwd=REPO)
        mock_url = procs.wait_listening(mock, "mock-upstream")
        on_url, on_key = gateway(procs, work, "triggers-on", mock_url, hook, True)
        off_url, off_key = gateway(procs, work, "triggers-off", mock_url, hook, False)
        results = {}
        # Warm both (query embedding cached, pools grown), then measure each twice, interleaved,
        # so that a slow moment of the shared machine does not fall on one side only.
        for label, url, key in (("on", on_url, on_key), ("off", off_url, off_key)):
            load(procs, work, f"warm-{label}", url, key, rate, 3)
        for round_ in (1, 2):
            for label, url, key in (("on", on_url, on_key), ("off", off_url, off_key)):
                results.setdefault(label, []).append(load(procs, work, f"{label}-{round_}", url, key, rate, seconds))
    finally:
        procs.stop_all()
        server.shutdown()
    rows = []
    for label in ("on", "off"):
        for run in results[label]:
            lat = run["latency_ms"]
            rows.append((label, run["count"], run["errors"], lat["p50"], lat["p99"], lat["max"],
                         run.get("header_counts", {}).get("x-memory-triggered", {})))
    print(f"\n{rate:g} requests/s for {seconds:g} s per run; latency from schedule to last byte (ms)\n")
    print(f"{'triggers':9} {'2xx':>6} {'errors':>6} {'p50':>8} {'p99':>8} {'max':>8}  X-Memory-Triggered")
    for label, count, errors, p50, p99, mx, triggered in rows:
        print(f"{label:9} {count:>6} {errors:>6} {p50:>8.3f} {p99:>8.3f} {mx:>8.3f}  {triggered}")
    best = {label: min(run["latency_ms"]["p99"] for run in results[label]) for label in results}
    median = {label: sorted(run["latency_ms"]["p50"] for run in results[label])[0] for label in results}
    print(f"\nadded by a firing trigger: p50 {median['on'] - median['off']:+.3f} ms, "
          f"p99 {best['on'] - best['off']:+.3f} ms (best run of each side); webhooks received: {Receiver.count}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"rate": rate, "seconds": seconds, "runs": results, "webhooks": Receiver.count}, f, indent=1)


if __name__ == "__main__":
    main()
