#!/usr/bin/env bash
# The latency memgate adds: the same open-loop load, first straight at mock-upstream, then through
# memgate in front of it, and the difference.
#
#   bash loadtest/proxy-overhead.sh [RATE] [DURATION]      # defaults: 1000 req/s, 30 s
#
# Everything runs on this machine, on 127.0.0.1 ports the OS picks. Environment knobs:
#   WARMUP=2            seconds of unmeasured load before each measured run (0: none)
#   BODY=loadtest/bodies/small.json   the Messages request body
#   MEMGATE_LOG_LEVEL=info            memgate's log level (its logs go to a temp file)
#   RESULTS_DIR=dir     keep the two JSON results there (direct.json, memgate.json)
#   SKIP_BUILD=1        use the existing target/release binaries
set -euo pipefail

rate="${1:-1000}"
duration="${2:-30}"
warmup="${WARMUP:-2}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
body="${BODY:-$repo/loadtest/bodies/small.json}"

if [[ "${SKIP_BUILD:-}" != "1" ]]; then
    echo "building release binaries (memgate, loadgen)..." >&2
    cargo build --release --quiet --bin memgate --example loadgen
fi
# memgate serve loads an embedding model and ONNX Runtime (scripts/fetch-assets is idempotent).
if [[ -z "${MEMGATE_MODEL_DIR:-}" || -z "${ORT_DYLIB_PATH:-}" ]]; then
    scripts/fetch-assets >&2
    # shellcheck disable=SC1091
    source .assets/env.sh
fi
memgate_bin="$repo/target/release/memgate"
loadgen_bin="$repo/target/release/examples/loadgen"

work="$(mktemp -d "${TMPDIR:-/tmp}/memgate-overhead.XXXXXX")"
pids=()
loadgen_pid=""
cleanup() {
    local pid
    if [[ -n "$loadgen_pid" ]]; then
        kill -TERM "$loadgen_pid" 2>/dev/null || true
        wait "$loadgen_pid" 2>/dev/null || true
    fi
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME PREFIX ARGS...: runs `memgate ARGS` from the repository root (templates/, .assets/),
# logs in $work/NAME.{out,err}, waits (30 s at most) for its
# "PREFIX listening on http://..." line and sets $started_url. (Not called in a subshell, so
# that the process id lands in $pids for the cleanup.)
start() {
    local name="$1" prefix="$2"
    shift 2
    "$memgate_bin" "$@" >"$work/$name.out" 2>"$work/$name.err" &
    local pid=$!
    pids+=("$pid")
    local url=""
    for _ in $(seq 300); do
        url="$(sed -n "s|^$prefix listening on \(http://127\.0\.0\.1:[0-9]*\)$|\1|p" "$work/$name.out" | head -n1)"
        [[ -n "$url" ]] && break
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$name exited before listening; its stderr:" >&2
            cat "$work/$name.err" >&2
            return 1
        fi
        sleep 0.1
    done
    if [[ -z "$url" ]]; then
        echo "$name did not say where it listens within 30 s; its stderr:" >&2
        cat "$work/$name.err" >&2
        return 1
    fi
    started_url="$url"
}

started_url=""
start mock "mock-upstream" mock-upstream --listen 127.0.0.1:0
mock_url="$started_url"
export MEMGATE_LOG_LEVEL="${MEMGATE_LOG_LEVEL:-info}"
export MEMGATE_DATABASE_URL="sqlite://$work/memgate.db" # a fresh, empty store
# All load comes from one caller key: lift the per-caller rate limit (600/min by default) so that
# memgate's 429s do not stand in for its latency.
cat >"$work/memgate.toml" <<'TOML'
[auth]
mode = "passthrough"
rate_limit_per_minute = 1000000000
TOML
start memgate "memgate" serve --config "$work/memgate.toml" --listen 127.0.0.1:0 \
    --upstream-url "$mock_url" --auth-mode passthrough
memgate_url="$started_url"
echo "mock-upstream at $mock_url, memgate at $memgate_url" >&2

load() { # load LABEL BASE_URL SECONDS [extra loadgen args]
    local label="$1" base="$2" seconds="$3"
    shift 3
    # In the background and waited for, so that a signal stops the script (and, through the
    # cleanup, loadgen too) at once rather than after the run.
    "$loadgen_bin" --label "$label" --url "$base/v1/messages" --rate "$rate" --duration "$seconds" \
        --body-file "$body" \
        --header "x-api-key: sk-ant-loadtest" \
        --header "anthropic-version: 2023-06-01" \
        "$@" &
    loadgen_pid=$!
    local status=0
    wait "$loadgen_pid" || status=$?
    loadgen_pid="" # finished: its id may be reused, so the cleanup must not signal it
    return "$status"
}

for target in "direct $mock_url" "memgate $memgate_url"; do
    read -r label base <<<"$target"
    if [[ "$warmup" != "0" ]]; then
        echo "warm-up: $label, $rate req/s for $warmup s" >&2
        load "$label" "$base" "$warmup" --json >/dev/null
    fi
    echo "measuring: $label, $rate req/s for $duration s" >&2
    load "$label" "$base" "$duration" --json >"$work/$label.json"
done

if [[ -n "${RESULTS_DIR:-}" ]]; then
    mkdir -p "$RESULTS_DIR"
    cp "$work/direct.json" "$work/memgate.json" "$RESULTS_DIR/"
fi

python3 - "$work/direct.json" "$work/memgate.json" <<'PY'
import json, sys

direct, proxied = (json.load(open(path)) for path in sys.argv[1:3])
rows = [
    ("requests scheduled", "scheduled", None),
    ("count (2xx)", "count", None),
    ("errors", "errors", None),
    ("achieved rate (req/s)", "achieved_rate", None),
    ("p50 (ms)", "latency_ms", "p50"),
    ("p90 (ms)", "latency_ms", "p90"),
    ("p99 (ms)", "latency_ms", "p99"),
    ("p99.9 (ms)", "latency_ms", "p99.9"),
    ("max (ms)", "latency_ms", "max"),
    ("driver send lag max (ms)", "send_lag_ms", "max"),
]

def get(result, key, sub):
    value = result[key]
    return value[sub] if sub else value

def fmt(value):
    return f"{value:.3f}" if isinstance(value, float) else str(value)

print(f"\nload: {direct['target_rate']:g} req/s for {direct['duration_s']:g} s, "
      "latency from each request's scheduled send time to its last body byte (2xx only)\n")
print(f"{'':26} {'direct':>12} {'via memgate':>12} {'added':>10}")
for title, key, sub in rows:
    d, p = get(direct, key, sub), get(proxied, key, sub)
    added = fmt(p - d) if key == "latency_ms" else ""
    print(f"{title:26} {fmt(d):>12} {fmt(p):>12} {added:>10}")
p50 = proxied["latency_ms"]["p50"] - direct["latency_ms"]["p50"]
p99 = proxied["latency_ms"]["p99"] - direct["latency_ms"]["p99"]
print(f"\nadded latency: p50 {p50:+.3f} ms, p99 {p99:+.3f} ms")
for result in (direct, proxied):
    if result["errors"]:
        print(f"warning: {result['label']}: {result['errors']} errors "
              f"{result['errors_by_kind']} statuses {result['error_statuses']} "
              f"first transport error: {result['first_transport_error']}")
PY
