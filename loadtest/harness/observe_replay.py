#!/usr/bin/env python3
"""A LoCoMo replay through memgate with observation on (docs/observation.md).

One memgate in front of `memgate mock-upstream`, whose extraction model answers the forced
`save_memories` call with scripted candidates — the good facts of each turn among junk of every
kind (docs/mock-upstream.md, "Observation"). Each LoCoMo conversation's first speaker is a person
(`X-Memory-Subject`), each of their turns one request, with the other speaker's role as the system
prompt; the same turn goes out twice, alternately first, with a key that holds `observe` and with
one that does not, so the latency of observation on and off is measured in the same run, on the
same machine state. When the queue has drained the script reads the gates' counts
(`GET /admin/v1/observer`) and every record written, and checks them against the script's good
facts, recomputed here from the same rules: a written record that is not one of them is junk.

    python3 loadtest/harness/observe_replay.py [--samples N] [--turns N] [--mode propose|write]
                                               [--json PATH]

Defaults: 2 conversations, every turn of their first speaker, `propose`. `write` makes records
active at once, so later turns inject them and the echo gate meets recalled memory. Needs a built
binary (target/release/memgate, else target/debug/memgate) and the model (`source .assets/env.sh`).
"""

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from procs import Procs, http, http_json, poll  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = os.path.join(REPO, os.environ.get("CARGO_TARGET_DIR", "target"))
LOCOMO = os.environ.get("LOCOMO", "/work/shared/benchmarks/locomo/locomo10.json")
ADMIN = "observe-replay-admin-token"
TENANT = "replay"

# The mock's good-fact rules (crates/mock-upstream/src/observe.rs), for the check.
OTHERS = {"sister", "brother", "wife", "husband", "friend", "mother", "father", "mom", "dad", "colleague", "son",
          "daughter"}
GUESSES = ["maybe", "perhaps", "probably", "i might", "i think", "not sure"]


def binary():
    for profile in ("release", "debug"):
        path = os.path.join(TARGET, profile, "memgate")
        if os.path.exists(path):
            return path, profile
    sys.exit("build memgate first: cargo build --release --bin memgate")


def sentences(text):
    out, current = [], ""
    for c in text:
        if c == "\n":
            if current.strip():
                out.append(current.strip())
            current = ""
            continue
        current += c
        if c in ".!?":
            if current.strip():
                out.append(current.strip())
            current = ""
    if current.strip():
        out.append(current.strip())
    return out


def good_facts(text):
    """The evidence sentences of the script's good facts in a turn."""
    found = []
    for sentence in sentences(text):
        lower = sentence.lower()
        if sentence.endswith("?") or any(g in lower for g in GUESSES):
            continue
        if any(w in OTHERS for w in re.split(r"[^0-9a-z]+", lower)):
            continue
        plain = sentence.strip().rstrip(".!?")
        low = plain.lower()
        if any(lead in low for lead in ("i prefer ", "i'd rather ", "i like ", "i love ")):
            at = min(low.find(lead) + len(lead) for lead in ("i prefer ", "i'd rather ", "i like ", "i love ")
                     if lead in low)
            if plain[at:].strip():
                found.append(sentence)
            continue
        if low.startswith("my ") and " is " in low[3:]:
            found.append(sentence)
            continue
        if any(low.startswith(lead) for lead in ("i am ", "i'm ", "i live ", "i work ", "i have ")):
            found.append(sentence)
    return found


def percentile(values, p):
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--turns", type=int, default=0, help="turns per conversation (0: all)")
    parser.add_argument("--mode", choices=["propose", "write"], default="propose")
    parser.add_argument("--json")
    args = parser.parse_args()
    memgate, profile = binary()
    data = json.load(open(LOCOMO))[: args.samples]
    work = tempfile.mkdtemp(prefix="observe-replay-")
    procs = Procs(work)
    try:
        mock = procs.spawn("mock", [memgate, "mock-upstream", "--listen", "127.0.0.1:0", "--no-record"])
        mock_url = procs.wait_listening(mock, "mock-upstream")
        config = os.path.join(work, "memgate.toml")
        with open(config, "w") as f:
            f.write(f'[memory]\nfunnel_timeout_ms = 2000\n[releases.v1]\nobserve = "{args.mode}"\n'
                    '[observer]\nmodel = "mock-extract"\npoll_interval_ms = 50\nconcurrency = 4\n'
                    'daily_calls_per_tenant = 1000000\ndaily_tokens_per_tenant = 1000000000\n')
        env = dict(os.environ, ANTHROPIC_API_KEY="sk-ant-replay-key", MEMGATE_ADMIN_TOKEN=ADMIN)
        gw = procs.spawn("memgate", [memgate, "serve", "--auth-mode", "managed", "--upstream-url", mock_url,
                                     "--listen", "127.0.0.1:0", "--database-url",
                                     f"sqlite://{work}/memgate.db", "--config", config], env=env)
        url = procs.wait_listening(gw, "memgate")
        admin = {"authorization": f"Bearer {ADMIN}", "x-memory-tenant": TENANT}

        def key(permissions):
            status, body = http_json("POST", f"{url}/admin/v1/keys",
                                     {"name": "replay", "scopes": [], "permissions": permissions}, admin)
            assert status == 201, body
            return body["key"]

        on_key, off_key = key(["observe", "assert_subject"]), key(["assert_subject"])
        latency = {"on": [], "off": []}
        expected = {}
        turns_sent = 0
        for sample in data:
            conv = sample["conversation"]
            person, other = conv["speaker_a"], conv["speaker_b"]
            subject = re.sub(r"[^a-z0-9]+", "-", f"{sample['sample_id']}-{person}".lower())
            system = f"You are {other}, chatting with your friend {person}. Answer warmly and briefly."
            sessions = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
            turns = [t["text"] for s in sessions for t in conv[s] if t.get("speaker") == person and t.get("text")]
            if args.turns:
                turns = turns[: args.turns]
            for i, text in enumerate(turns):
                body = json.dumps({"model": "claude-mock", "max_tokens": 200, "system": system,
                                   "messages": [{"role": "user", "content": text}]})
                order = [("on", on_key), ("off", off_key)] if i % 2 == 0 else [("off", off_key), ("on", on_key)]
                for which, secret in order:
                    headers = {"x-api-key": secret, "x-memory-subject": subject, "content-type": "application/json",
                               "anthropic-version": "2023-06-01"}
                    started = time.perf_counter()
                    status, answer = http("POST", f"{url}/v1/messages", body, headers)
                    latency[which].append((time.perf_counter() - started) * 1000)
                    assert status == 200, answer[:300]
                for sentence in good_facts(text):
                    expected.setdefault(subject, []).append(sentence)
                turns_sent += 1

        def drained():
            status, body = http_json("GET", f"{url}/admin/v1/observer?limit=1", None, admin)
            queue = body["queue"]
            return body if status == 200 and queue["pending"] + queue["retrying"] == 0 else None

        time.sleep(0.2)
        observer = poll("the observer to drain its queue", drained, 600, interval=0.5, proc=gw)
        records, cursor = [], None
        while True:
            path = f"{url}/admin/v1/memories?limit=500" + (f"&cursor={cursor}" if cursor else "")
            status, page = http_json("GET", path, None, admin)
            records += page["data"]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        # Junk written: a record whose evidence is not one of the script's good facts of its subject.
        junk = []
        covered = set()
        for record in records:
            subject = record["scope"][0].removeprefix("user:")
            evidence = record["metadata"].get("observer", {}).get("evidence")
            if record["author"] != "observer" or evidence not in expected.get(subject, []):
                junk.append(record["id"])
            else:
                covered.add((subject, evidence))
        wanted = {(s, e) for s, facts in expected.items() for e in facts}
        gates = observer["gates"]
        usage = observer["usage"]
        result = {
            "binary": profile,
            "mode": args.mode,
            "conversations": len(data),
            "turns": turns_sent,
            "gates": gates,
            "candidates": sum(gates.values()),
            "records_written": len(records),
            "junk_written": len(junk),
            "good_facts": len(wanted),
            "good_facts_written": len(covered),
            "good_facts_merged_by_dedup": len(wanted - covered),
            "extraction_calls": sum(d["calls"] for d in usage),
            "extraction_tokens": sum(d["input_tokens"] + d["output_tokens"] for d in usage),
            "latency_ms": {which: {"p50": round(statistics.median(v), 2), "p99": round(percentile(v, 99), 2),
                                   "mean": round(statistics.mean(v), 2)} for which, v in latency.items()},
        }
        print(f"LoCoMo replay: {len(data)} conversations, {turns_sent} turns, mode {args.mode}, {profile} build")
        print(f"{'gate':<14}{'candidates':>11}")
        for gate, count in sorted(gates.items(), key=lambda kv: -kv[1]):
            print(f"{gate:<14}{count:>11}")
        print(f"records written {len(records)}, junk written {len(junk)}, good facts {len(wanted)} "
              f"(written {len(covered)}, merged into a twin by dedup {len(wanted - covered)})")
        for which in ("off", "on"):
            l = result["latency_ms"][which]
            print(f"latency observe {which:<3}: p50 {l['p50']} ms, p99 {l['p99']} ms, mean {l['mean']} ms")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=2)
        if junk:
            print("junk:", junk[:10])
            sys.exit(1)
    finally:
        procs.stop_all()


if __name__ == "__main__":
    main()
