#!/usr/bin/env bash
# The console's end-to-end test (console.test.mjs, headless Chromium) against the REAL memgate:
# starts `memgate mock-upstream` and `memgate serve` (managed mode, a SQLite database in a temp
# folder, an admin and a viewer token), seeds a few records and a gateway key through the admin
# API, sends a few Messages requests through memgate (so the charts and the recent requests have
# real traffic), then runs the test with MEMGATE_URL pointing at it. Screenshots go to
# docs/img/console-*.png unless E2E_SCREENSHOTS=0.
#
#   bash console/e2e/run-real.sh [node --test args...]
#
# Needs Node >= 20 with npm, Debian's chromium (/usr/bin/chromium, or CHROMIUM_PATH), and a
# memgate binary: $MEMGATE_BIN, else target/debug/memgate (this script does not build it). The
# embedding model comes from .assets/env.sh (scripts/fetch-assets) unless MEMGATE_MODEL_DIR and
# ORT_DYLIB_PATH are set. MEMGATE_CONSOLE_KEEP=1 keeps the temp folder (the services' logs).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
console="$repo/console"
cd "$repo"

fail() {
    echo "console e2e (real memgate): $*" >&2
    exit 1
}

command -v node >/dev/null && command -v npm >/dev/null || fail "node and npm are needed (Node >= 20)"
[[ -x "${CHROMIUM_PATH:-/usr/bin/chromium}" ]] || fail "no chromium at ${CHROMIUM_PATH:-/usr/bin/chromium}: apt-get install -y chromium"
export MEMGATE_BIN="${MEMGATE_BIN:-$repo/target/debug/memgate}"
[[ -x "$MEMGATE_BIN" ]] || fail "no memgate binary at $MEMGATE_BIN: run 'cargo build' or set MEMGATE_BIN"

scripts/npm-ci-if-changed "$console" "console e2e"

if [[ -z "${MEMGATE_MODEL_DIR:-}" || -z "${ORT_DYLIB_PATH:-}" ]]; then
    scripts/fetch-assets >&2
    # shellcheck disable=SC1091
    source .assets/env.sh
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/memgate-console-e2e.XXXXXX")"
pids=()
cleanup() {
    # Only the processes this script started, by their ids.
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [[ -n "${MEMGATE_CONSOLE_KEEP:-}" ]]; then echo "console e2e: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# Starts `memgate <args>` with its stdout and stderr in $work/<name>.{out,err}; sets `url` to the
# address of its "listening on" line once it appears (30 s at most).
url=""
start() {
    local name="$1"
    shift
    # No MEMGATE_* setting from the caller's environment leaks in, except the model's.
    env -u MEMGATE_LISTEN -u MEMGATE_DATABASE_URL -u MEMGATE_UPSTREAM_URL -u MEMGATE_AUTH_MODE \
        -u MEMGATE_ADMIN_LISTEN -u MEMGATE_URL "${service_env[@]}" \
        "$MEMGATE_BIN" "$@" >"$work/$name.out" 2>"$work/$name.err" &
    pids+=("$!")
    local pid=$! deadline=$((SECONDS + 30))
    url=""
    while [[ -z "$url" ]]; do
        url="$(grep -o -m1 'listening on http://[0-9.:]*' "$work/$name.out" | cut -d' ' -f3 || true)"
        if [[ -z "$url" ]]; then
            kill -0 "$pid" 2>/dev/null || { cat "$work/$name.err" >&2; fail "$name exited before listening"; }
            ((SECONDS < deadline)) || { cat "$work/$name.err" >&2; fail "$name did not listen within 30 s"; }
            sleep 0.1
        fi
    done
}

admin_token="console-e2e-admin-token-0123456789"
viewer_token="console-e2e-viewer-token-0123456789"
service_env=()
start mock mock-upstream --listen 127.0.0.1:0
mock_url="$url"

cat >"$work/memgate.toml" <<'EOF'
# A debug build on a busy CI machine can need more than the default 50 ms for one query's
# embedding; the console test is about what the console shows, not about the budget.
[memory]
funnel_timeout_ms = 10000

# The review screen is tested on what the real observer proposes: v1 observes the callers that
# hold `observe` (only the test's observer key), with the mock's extraction model.
[releases.v1]
observe = "propose"

[observer]
model = "mock-extract"
poll_interval_ms = 100
EOF
service_env=(
    "ANTHROPIC_API_KEY=sk-ant-console-e2e"
    "MEMGATE_ADMIN_TOKEN=$admin_token"
    "MEMGATE_ADMIN_VIEWER_TOKEN=$viewer_token"
)
start memgate serve --listen 127.0.0.1:0 --auth-mode managed --upstream-url "$mock_url" \
    --database-url "sqlite://$work/memgate.db" --config "$work/memgate.toml"
base="$url"
echo "console e2e: memgate at $base (mock upstream at $mock_url)" >&2

# POSTs JSON to memgate's admin API; prints the answer, fails on anything but 2xx.
admin_post() {
    curl -fsS -X POST "$base/admin/v1$1" -H "authorization: Bearer $admin_token" \
        -H 'content-type: application/json' --data-binary "$2" ||
        fail "POST /admin/v1$1 failed"
}

# A few records of several types, so Records, the data health and explain have something real.
admin_post /memories '{"id":"mem-cust-u-789-profile","type":"customer_profile","key":"customer:u-789:profile","scope":["user:u-789"],"priority":4,"aliases":["my order","my delivery"],"content":{"name":"Dana Reyes","preferred_language":"en","preferred_channel":"email","notes":"Prefers delivery next week; order 4471 is a gift."}}' >/dev/null
admin_post /memories '{"id":"mem-fact-returns","type":"fact","scope":["public"],"priority":3,"content":{"statement":"Returns are accepted within 30 days of delivery with the original receipt.","source":"returns policy 2026"}}' >/dev/null
admin_post /memories '{"id":"mem-sop-late-delivery","type":"internal_sop","scope":["team:support"],"priority":3,"content":{"process_name":"Late delivery","steps":"1. Check the carrier status. 2. Past 5 days late, offer a 10% voucher."}}' >/dev/null
admin_post /memories '{"id":"mem-pref-u-789-tone","type":"preference","scope":["user:u-789"],"priority":2,"content":{"topic":"tone","preference":"Short answers, no emojis."}}' >/dev/null

# A gateway key for the support bot, which may name the customer it serves.
key="$(admin_post /keys '{"name":"support-bot","scopes":["team:support"],"permissions":["assert_subject"]}' |
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>process.stdout.write(JSON.parse(s).key))')"

# An app whose conversations the observer learns from (the review test's own subject).
observer_key="$(admin_post /keys '{"name":"observed-app","scopes":[],"permissions":["observe","assert_subject","pin_release"]}' |
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>process.stdout.write(JSON.parse(s).key))')"

# Real traffic: the charts, the token savings and the recent requests read it.
for question in "When will my order arrive? I asked for next week delivery." \
    "Can I still return the lamp?" "My delivery is late again" "What is the capital of France?"; do
    body="$(node -e 'process.stdout.write(JSON.stringify({model:"claude-sonnet-4-5",max_tokens:64,messages:[{role:"user",content:process.argv[1]}]}))' "$question")"
    curl -fsS -o /dev/null "$base/v1/messages" -H "x-api-key: $key" -H 'anthropic-version: 2023-06-01' \
        -H 'content-type: application/json' -H 'x-memory-subject: u-789' --data-binary "$body" ||
        fail "a Messages request through memgate failed"
done

set +e
(
    cd "$console"
    MEMGATE_URL="$base" MEMGATE_ADMIN_TOKEN="$admin_token" MEMGATE_ADMIN_VIEWER_TOKEN="$viewer_token" \
        E2E_GATEWAY_KEY="$key" E2E_OBSERVER_KEY="$observer_key" node --test --test-concurrency=1 --test-reporter=spec "$@" e2e/console.test.mjs
)
status=$?
set -e
if ((status != 0)); then
    echo "console e2e (real memgate): FAILED (node --test exited $status); memgate's log: $work/memgate.err" >&2
    tail -n 40 "$work/memgate.err" >&2
fi
exit "$status"
