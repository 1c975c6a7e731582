#!/bin/sh
# For CI: rebuilds the console from its sources and fails if the committed dist/ differs from the
# fresh build (memgate embeds dist/ at cargo time and must not need node, so dist/ is committed and
# has to match the sources). Needs node >= 20 and the npm registry.
set -eu
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --loglevel=error
npm run build --silent
if ! git diff --quiet --exit-code -- dist || [ -n "$(git ls-files --others --exclude-standard -- dist)" ]; then
  echo "console/dist differs from a fresh build of console/src: run 'npm run build' in console/ and commit dist/" >&2
  git status --short -- dist >&2
  exit 1
fi
echo "console/dist matches a fresh build"
