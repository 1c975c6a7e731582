#!/usr/bin/env bash
# Run the real-client end-to-end suite: Claude Code (npm @anthropic-ai/claude-code, headless) and
# the official TypeScript SDK (npm @anthropic-ai/sdk) against memgate and `memgate mock-upstream`.
#
#   bash tests/clients/run.sh [node --test args...]     # e.g. --test-name-pattern 'Claude Code'
#
# Needs Node >= 20 with npm, and a memgate binary: $MEMGATE_BIN, else target/debug/memgate (this
# script does not build it). Installs tests/clients/package-lock.json with `npm ci` when it changed
# since the last install, fetches the embedding assets (scripts/fetch-assets) unless
# MEMGATE_MODEL_DIR and ORT_DYLIB_PATH are set, and exits with node's test runner's code.
# MEMGATE_CLIENTS_KEEP=1 keeps the temp folders (services' logs, Claude Code's HOME).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
clients="$repo/tests/clients"
cd "$repo"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "tests/clients: node and npm are needed (Node >= 20)" >&2
    exit 1
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if (( major < 20 )); then
    echo "tests/clients: Node >= 20 is needed, found $(node --version)" >&2
    exit 1
fi

scripts/npm-ci-if-changed "$clients" "tests/clients"

if [[ -z "${MEMGATE_MODEL_DIR:-}" || -z "${ORT_DYLIB_PATH:-}" ]]; then
    scripts/fetch-assets >&2
    # shellcheck disable=SC1091
    source .assets/env.sh
fi

export MEMGATE_BIN="${MEMGATE_BIN:-$repo/target/debug/memgate}"
if [[ ! -x "$MEMGATE_BIN" ]]; then
    echo "tests/clients: no memgate binary at $MEMGATE_BIN: run 'cargo build' or set MEMGATE_BIN" >&2
    exit 1
fi

# The two test files run one after the other: each starts its own mock-upstream and memgate, and
# a 2-core machine loads one embedding model at a time more quickly than two.
set +e
node --test --test-concurrency=1 --test-reporter=spec "$@" \
    "$clients/claude_code.test.mjs" "$clients/typescript_sdk.test.mjs" "$clients/typescript_sdk_memory_tools.test.mjs"
status=$?
set -e
if (( status != 0 )); then
    echo "tests/clients: FAILED (node --test exited $status); the failing tests and why are listed above" >&2
fi
exit "$status"
