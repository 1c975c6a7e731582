#!/usr/bin/env bash
# Checks memgate's webhook deliveries with the Standard Webhooks specification's own verifier
# (the `standardwebhooks` package from PyPI), end to end over HTTP:
#
#   bash tests/webhooks/run.sh [pytest args...]
#
# Needs python3 (with venv/pip) and cargo. It creates or reuses a virtualenv at
# <repo>/.venv-webhooks, installs tests/webhooks/requirements.txt into it when that file changed,
# builds the integration-test binary (unless MEMGATE_INTEGRATION_BIN names one), and runs pytest:
# the Python test starts a receiver that verifies every delivery with the library, and runs the
# ignored Rust test `triggers::external_receiver`, whose delivery worker sends to it. Exits with
# pytest's code.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

venv="$repo/.venv-webhooks"
scripts/venv-if-changed "$venv" "$repo/tests/webhooks/requirements.txt" "tests/webhooks"

if [[ -z "${MEMGATE_INTEGRATION_BIN:-}" ]]; then
    # The path of the integration-test executable, from cargo's own report of what it built.
    MEMGATE_INTEGRATION_BIN="$(cargo test --quiet --no-run --test integration --message-format=json-render-diagnostics \
        | "$venv/bin/python" -c '
import json, sys
for line in sys.stdin:
    try:
        message = json.loads(line)
    except ValueError:
        continue
    if message.get("reason") == "compiler-artifact" and message.get("target", {}).get("name") == "integration" and message.get("executable"):
        print(message["executable"])
')"
    if [[ -z "$MEMGATE_INTEGRATION_BIN" ]]; then
        echo "tests/webhooks: could not build the integration tests (cargo test --no-run --test integration)" >&2
        exit 1
    fi
    export MEMGATE_INTEGRATION_BIN
fi

set +e
"$venv/bin/python" -m pytest tests/webhooks -q -p no:cacheprovider "$@"
status=$?
set -e
exit "$status"
