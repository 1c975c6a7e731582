#!/usr/bin/env bash
# The CPU memgate spends relaying one long streamed answer, with memgate's tools offered (the
# tool loop rebuilds every block from its deltas, for a next round) and without (relayed as it
# comes), for builds side by side:
#
#   bash loadtest/stream-deltas.sh old=/path/to/memgate new=target/release/memgate
#
# One mock upstream (`memgate mock-upstream` of the last build given) answers every request with
# a text of TEXT_BYTES (400000) bytes in DELTAS (40000) text deltas, with no pause. Each build
# serves in managed mode on its own SQLite file; two keys: one holding `memory_read_tools` (the
# tools are offered; the mock's model answers without calling them) and one without. Each request
# is sent ROUNDS (5) times, one after the other, read whole with curl; the figure is memgate's
# utime + stime from /proc over the request, its median and its least, in seconds.
set -euo pipefail
DELTAS=${DELTAS:-40000}; TEXT_BYTES=${TEXT_BYTES:-400000}; ROUNDS=${ROUNDS:-5}
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $# -eq 0 ]]; then sed -n '2,13p' "$0" >&2; exit 2; fi
if [[ -z "${MEMGATE_MODEL_DIR:-}" || -z "${ORT_DYLIB_PATH:-}" ]]; then
    "$repo/scripts/fetch-assets" >&2
    # shellcheck disable=SC1091
    source "$repo/.assets/env.sh"
fi
work=$(mktemp -d)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
wait_for() { # url: polls up to 60 s
    for _ in $(seq 1 600); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done
    echo "no answer from $1" >&2; return 1
}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"; true' EXIT
last_bin=${!#}; last_bin=${last_bin#*=}
mock_port=$(free_port)
"$last_bin" mock-upstream --listen "127.0.0.1:$mock_port" --deltas "$DELTAS" --text-bytes "$TEXT_BYTES" \
    --no-record >"$work/mock.log" 2>&1 &
pids+=("$!")
wait_for "http://127.0.0.1:$mock_port/v1/models"
body='{"model":"claude-mock","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Tell me a long story."}]}'
printf '[auth]\nrate_limit_per_minute = 1000000000\n' >"$work/memgate.toml"
printf '%-8s %-14s %8s %12s %12s\n' build tools deltas "median (s)" "least (s)"
for spec in "$@"; do
    name=${spec%%=*}; bin=${spec#*=}
    port=$(free_port)
    MEMGATE_DATABASE_URL="sqlite://$work/$name.db" ANTHROPIC_API_KEY=sk-ant-bench-upstream \
        MEMGATE_ADMIN_TOKEN=bench-admin-token MEMGATE_LOG_LEVEL=warn \
        "$bin" serve --config "$work/memgate.toml" --listen "127.0.0.1:$port" \
        --upstream-url "http://127.0.0.1:$mock_port" --auth-mode managed >"$work/$name.log" 2>&1 &
    pid=$!; pids+=("$pid")
    wait_for "http://127.0.0.1:$port/readyz"
    for tools in offered none; do
        permissions='[]'; [[ $tools == offered ]] && permissions='["memory_read_tools"]'
        key=$(curl -sf "http://127.0.0.1:$port/admin/v1/keys" -H 'authorization: Bearer bench-admin-token' \
            -H 'content-type: application/json' \
            -d "{\"name\":\"bench-$tools\",\"scopes\":[\"public\"],\"permissions\":$permissions}" |
            python3 -c 'import json, sys; print(json.load(sys.stdin)["key"])')
        costs=()
        for _ in $(seq 1 "$ROUNDS"); do
            before=$(ticks "$pid")
            curl -sf -o "$work/answer" "http://127.0.0.1:$port/v1/messages" -H "x-api-key: $key" \
                -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' -d "$body"
            after=$(ticks "$pid")
            grep -q 'event: message_stop' "$work/answer" || { echo "$name: the answer did not end" >&2; exit 1; }
            costs+=("$((after - before))")
        done
        sorted=$(printf '%s\n' "${costs[@]}" | sort -n)
        median=$(sed -n "$(((ROUNDS + 1) / 2))p" <<<"$sorted"); least=$(head -1 <<<"$sorted")
        awk -v n="$name" -v t="$tools" -v d="$DELTAS" -v m="$median" -v l="$least" -v hz="$hz" \
            'BEGIN { printf "%-8s %-14s %8d %12.2f %12.2f\n", n, t, d, m / hz, l / hz }'
    done
    kill "$pid"; wait "$pid" 2>/dev/null || true
done
