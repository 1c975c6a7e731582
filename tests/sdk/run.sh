#!/usr/bin/env bash
# Run the real-client suite: the official `anthropic` Python SDK against mock-upstream and memgate.
#
#   bash tests/sdk/run.sh [pytest args...]
#
# Needs only python3 (with venv/pip) and cargo. It creates or reuses a virtualenv at
# <repo>/.venv-sdk, installs tests/sdk/requirements.txt into it when that file changed, fetches
# the embedding assets (scripts/fetch-assets) unless MEMGATE_MODEL_DIR and ORT_DYLIB_PATH are set,
# builds target/debug/memgate (unless MEMGATE_BIN names a binary to test), and exits with
# pytest's code.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

venv="$repo/.venv-sdk"
scripts/venv-if-changed "$venv" "$repo/tests/sdk/requirements.txt" "tests/sdk"

# `memgate serve` loads an embedding model and ONNX Runtime: fetch them (idempotent; only a hash
# check when they are in place) unless the caller says where they are.
if [[ -z "${MEMGATE_MODEL_DIR:-}" || -z "${ORT_DYLIB_PATH:-}" ]]; then
    scripts/fetch-assets >&2
    # shellcheck disable=SC1091
    source .assets/env.sh
fi

if [[ -z "${MEMGATE_BIN:-}" ]]; then
    cargo build --quiet --bin memgate
    export MEMGATE_BIN="$repo/target/debug/memgate"
fi

set +e
"$venv/bin/python" -m pytest tests/sdk -q -p no:cacheprovider "$@"
status=$?
set -e
exit "$status"
