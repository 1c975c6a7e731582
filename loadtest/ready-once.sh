#!/usr/bin/env bash
# One start of a memgate binary on an existing PostgreSQL store, timed to "memory index built":
# the load's wall time (memgate's own log), memgate's CPU, PostgreSQL's CPU (every process of the
# `postgres` user, so run it on a machine where nothing else uses that server) and the RSS once
# built. Alternate builds or stores in a loop to compare them:
#
#   DB=memgate_crm_c1000000_k100000_t10000_p2000      # the store loadtest/crm.sh left
#   for i in 1 2; do for b in old new; do bash loadtest/ready-once.sh /path/to/$b $DB; done; done
#
# Needs the model (scripts/fetch-assets) and PostgreSQL on 127.0.0.1:5432 (PG_URL to change).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin=$1 db=$2
pg_url=${PG_URL:-postgres://postgres@127.0.0.1:5432}
# shellcheck disable=SC1091
source "$repo/.assets/env.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '[auth]\nmode = "managed"\n' > "$work/memgate.toml"
pg_ticks() {
    local total=0 pid
    for pid in $(pgrep -u postgres); do
        total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    echo "$total"
}
pg_before=$(pg_ticks)
cd "$repo"
MEMGATE_DATABASE_URL="$pg_url/$db" MEMGATE_LOG_LEVEL="warn,memgate=info" NO_COLOR=1 \
    MEMGATE_ADMIN_TOKEN="ready-once-$(date +%s%N)" ANTHROPIC_API_KEY=unused \
    "$bin" serve --config "$work/memgate.toml" --listen 127.0.0.1:0 --upstream-url http://127.0.0.1:9 \
    --auth-mode managed > "$work/out" 2> "$work/err" &
pid=$!
until grep -qs 'memory index built' "$work/err"; do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "memgate exited before its index was built:" >&2
        tail -5 "$work/err" >&2
        exit 1
    fi
    sleep 0.2
done
memgate_ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
pg_after=$(pg_ticks)
rss_kb=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
kill "$pid"
wait "$pid" 2>/dev/null || true
load_ms=$(grep 'memory index built' "$work/err" | sed 's/.*elapsed_ms=\([0-9]*\).*/\1/')
hz=$(getconf CLK_TCK)
echo "$(basename "$bin") $db load_ms=$load_ms memgate_cpu_s=$((memgate_ticks / hz)) pg_cpu_s=$(((pg_after - pg_before) / hz)) rss_mb=$((rss_kb / 1024))"
