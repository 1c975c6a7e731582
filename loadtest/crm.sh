#!/usr/bin/env bash
# The CRM workload: one tenant on PostgreSQL with 1,000,000 customer profiles, 100,000 public
# knowledge-base records and 10,000 team records, imported with vectors and queried with the real
# model at 1,000 req/s (loadtest/harness/crm.py says how it is built).
#
#   bash loadtest/crm.sh                       # the full size (~10 min with the pool cached: 1.11M imported in ~3 min, ready in ~55 s)
#   bash loadtest/crm.sh --customers 20000     # a scaled-down run
#   bash loadtest/crm.sh --customers 10000 --compare a=BIN,b=BIN --rate 100 --duration 10   # builds in turn
#   bash loadtest/crm.sh --help                # every option
#
# Needs PostgreSQL (scripts/services starts it; --pg-url or MEMGATE_TEST_POSTGRES_URL names an
# admin connection that may CREATE DATABASE). SKIP_BUILD=1 uses the existing release binaries.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
if [[ "${SKIP_BUILD:-}" != "1" ]]; then
    echo "building release binaries (memgate, loadgen)..." >&2
    nice -n 10 cargo build --release --quiet --bin memgate --example loadgen
fi
if [[ -z "${MEMGATE_MODEL_DIR:-}" || -z "${ORT_DYLIB_PATH:-}" ]]; then
    scripts/fetch-assets >&2
    # shellcheck disable=SC1091
    source .assets/env.sh
fi
exec python3 loadtest/harness/crm.py "$@"
