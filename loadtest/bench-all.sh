#!/usr/bin/env bash
# The load benchmark: memgate (pass-through; funnel with warm query embeddings; funnel
# with every query new; a tenant with 100,000 records; streaming) side by side with the direct
# mock (the floor), nginx proxy_pass and the LiteLLM proxy, open-loop at fixed offered rates, all
# on this machine in front of the same `memgate mock-upstream`. Writes docs/benchmarks-load.md and
# docs/img/load-p99.png (full), docs/img/soak.png (soak).
#
#   bash loadtest/bench-all.sh quick     # ~5 min: 3-s runs, a few rates, 5,000 records; writes only
#                                        #   loadtest/results/quick/ (never docs/)
#   bash loadtest/bench-all.sh full      # every scenario and rate, 20-s runs, 100,000 records
#   bash loadtest/bench-all.sh soak      # 10 min at 1,000 req/s through the funnel, RSS every 5 s
#   bash loadtest/bench-all.sh prepare   # only import RECORDS records once (loadtest/.cache/)
#   bash loadtest/bench-all.sh report    # rewrite docs/ from loadtest/results/{full,soak}
#   bash loadtest/bench-all.sh profile   # perf on memgate: CPU per request, hottest functions
#                                        #   (pass-through and funnel warm, PROFILE_RATE 500/s)
#
# Knobs (environment): DURATION, WARMUP (s per run); RATES, LITELLM_RATES, NEWQ_RATES,
# STREAM_RATES, BIG_RATES (comma lists, req/s); RECORDS (the big tenant), FUNNEL_RECORDS;
# SCENARIOS (subset of sweep,stream,newq,litellm,big); RECORDS_CACHE=0 (import again even when a
# store with RECORDS records is cached); SOAK_SECONDS, SOAK_RATE, SOAK_SAMPLE; PROFILE_RATE,
# PROFILE_HZ, PROFILE_TENANT=big (profile, which needs `perf`: apt-get install linux-perf); MEMGATE_LOG_LEVEL
# (default info, as shipped); IMPORT_CHUNK (1000 lines a request), IMPORT_PACED=0 (send the
# import requests back to back); RSS_LIMIT_MB (8000: a server above it is killed); RESULTS_DIR;
# KEEP_WORK=1 (keep the temp dir with every log).
# Binaries: MEMGATE_BIN, LOADGEN_BIN (default /work/target-bench/release/…, built here unless
# SKIP_BUILD=1; CARGO_TARGET_DIR changes where); MEMGATE_COMMIT names what MEMGATE_BIN was built
# from when that is not this work tree's HEAD.
set -euo pipefail

mode="${1:-full}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
case "$mode" in
quick | full | soak | prepare | report | profile) ;;
*)
    sed -n '2,26p' "$0" >&2
    exit 2
    ;;
esac
if [[ "$mode" == report ]]; then
    exec python3 loadtest/harness/bench.py report
fi

target="${CARGO_TARGET_DIR:-/work/target-bench}"
export MEMGATE_BIN="${MEMGATE_BIN:-$target/release/memgate}"
export LOADGEN_BIN="${LOADGEN_BIN:-$target/release/examples/loadgen}"
if [[ "${SKIP_BUILD:-}" != "1" ]]; then
    echo "building release binaries (memgate, loadgen) into $target ..." >&2
    CARGO_TARGET_DIR="$target" cargo build --release --quiet --bin memgate --example loadgen
fi
# memgate serve loads the embedding model and ONNX Runtime (scripts/fetch-assets is idempotent).
if [[ -z "${MEMGATE_MODEL_DIR:-}" || -z "${ORT_DYLIB_PATH:-}" ]]; then
    scripts/fetch-assets >&2
    # shellcheck disable=SC1091
    source .assets/env.sh
fi
case "$mode" in
soak | prepare) bash loadtest/peers/setup.sh plot ;;
profile) ;;
*) bash loadtest/peers/setup.sh ;;
esac

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r); $(uptime)" >&2
exec python3 loadtest/harness/bench.py "$mode"
