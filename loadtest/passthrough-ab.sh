#!/usr/bin/env bash
# memgate pass-through builds side by side with nginx, in one run: CPU per request.
#
#   bash loadtest/passthrough-ab.sh old=/path/to/memgate new=target/release/memgate
#
# Starts one mock upstream (`memgate mock-upstream`, from the first build), each build as a
# pass-through gateway in front of it (SQLite, auth passthrough, log level info as shipped) and
# nginx (loadtest/peers/nginx.conf.in; NGINX=0 leaves it out), then, ROUNDS times, for each in
# turn: WARM seconds of load unmeasured, then DUR seconds at RATE requests/s (open loop,
# `loadgen`, loadtest/bodies/small.json), and prints the server's CPU per request
# (utime + stime from /proc, nginx's workers included), the mock's, and p50 / p99.
# Knobs: RATE (1000), DUR (15), WARM (3), ROUNDS (3), NGINX (1), LOADGEN (the loadgen example;
# default target/release/examples/loadgen), PERF_NAME=<label> (perf record that one's first
# measured run, with DWARF call graphs; the file's path is printed).
set -euo pipefail
RATE=${RATE:-1000}; DUR=${DUR:-15}; WARM=${WARM:-3}; ROUNDS=${ROUNDS:-3}
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOADGEN=${LOADGEN:-$repo/target/release/examples/loadgen}
if [[ $# -eq 0 ]]; then sed -n '2,16p' "$0" >&2; exit 2; fi
if [[ -z "${MEMGATE_MODEL_DIR:-}" || -z "${ORT_DYLIB_PATH:-}" ]]; then
    "$repo/scripts/fetch-assets" >&2
    # shellcheck disable=SC1091
    source "$repo/.assets/env.sh"
fi
work=$(mktemp -d)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
wait_for() { # url: polls up to 60 s
    for _ in $(seq 1 600); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done
    echo "no answer from $1" >&2; return 1
}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; true' EXIT
first_bin=${1#*=}
mock_port=$(free_port)
"$first_bin" mock-upstream --listen "127.0.0.1:$mock_port" --ttft-ms 0 --delta-interval-ms 0 --deltas 5 \
    --no-record >"$work/mock.log" 2>&1 &
mock_pid=$!; pids+=("$mock_pid")
wait_for "http://127.0.0.1:$mock_port/v1/models"
declare -A port pid
names=()
printf '[auth]\nmode = "passthrough"\nrate_limit_per_minute = 1000000000\n' >"$work/memgate.toml"
for spec in "$@"; do
    name=${spec%%=*}; bin=${spec#*=}
    port[$name]=$(free_port)
    MEMGATE_DATABASE_URL="sqlite://$work/$name.db" ANTHROPIC_API_KEY=sk-ant-bench-upstream MEMGATE_LOG_LEVEL=info \
        "$bin" serve --config "$work/memgate.toml" --listen "127.0.0.1:${port[$name]}" \
        --upstream-url "http://127.0.0.1:$mock_port" --auth-mode passthrough >"$work/$name.log" 2>&1 &
    pid[$name]=$!; pids+=("$!"); names+=("$name")
    wait_for "http://127.0.0.1:${port[$name]}/readyz"
done
if [[ "${NGINX:-1}" == 1 ]]; then
    port[nginx]=$(free_port); mkdir -p "$work/nginx"
    sed -e "s#@PREFIX@#$work/nginx#g" -e "s#@PORT@#${port[nginx]}#g" -e "s#@UPSTREAM@#127.0.0.1:$mock_port#g" \
        "$repo/loadtest/peers/nginx.conf.in" >"$work/nginx/nginx.conf"
    env -u NGINX nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" -g 'daemon off;' &
    pid[nginx]=$!; pids+=("$!"); names=(nginx "${names[@]}")
    wait_for "http://127.0.0.1:${port[nginx]}/v1/models"
fi
cpu_of() { # a server's ticks, with its children (nginx's workers)
    local total=0 p
    for p in "$1" $(pgrep -P "$1" || true); do total=$((total + $(ticks "$p"))); done
    echo "$total"
}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $RATE/s, ${DUR}-s cells; $(date -u +%FT%TZ)"
for round in $(seq 1 "$ROUNDS"); do
    for name in "${names[@]}"; do
        args=(--url "http://127.0.0.1:${port[$name]}/v1/messages" --rate "$RATE" --header "anthropic-version: 2023-06-01"
            --header "x-api-key: sk-ant-bench-caller" --body-file "$repo/loadtest/bodies/small.json" --json)
        "$LOADGEN" --label warm-up --duration "$WARM" "${args[@]}" >/dev/null
        recorder=""
        if [[ "${PERF_NAME:-}" == "$name" && $round == 1 ]]; then
            perf record -F 999 --call-graph dwarf,16384 -p "${pid[$name]}" -o "$work/$name.perf.data" 2>/dev/null &
            recorder=$!
        fi
        server0=$(cpu_of "${pid[$name]}"); mock0=$(ticks "$mock_pid")
        out=$("$LOADGEN" --label "$name" --duration "$DUR" "${args[@]}")
        server1=$(cpu_of "${pid[$name]}"); mock1=$(ticks "$mock_pid")
        if [[ -n "$recorder" ]]; then kill -INT "$recorder"; wait "$recorder" || true; echo "perf: $work/$name.perf.data"; fi
        echo "$out" | python3 -c "
import json, sys
d = json.load(sys.stdin); n = max(d['count'], 1); tick = 1e6 / 100
print(f\"round $round {'$name':8} {($server1 - $server0) * tick / n:5.0f} µs CPU a request (mock {($mock1 - $mock0) * tick / n:3.0f}), \"
      f\"{d['count']} ok, {d['errors']} errors, p50 {d['latency_ms']['p50']:.3f} ms, p99 {d['latency_ms']['p99']:.3f} ms\")"
    done
done
