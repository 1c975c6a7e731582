#!/usr/bin/env bash
# Installs what the load benchmark compares memgate with, and its plotting library; nothing of
# theirs is committed. Idempotent: a second run only checks.
#
#   bash loadtest/peers/setup.sh            # nginx + LiteLLM + matplotlib
#   bash loadtest/peers/setup.sh nginx      # one of: nginx, litellm, plot
#
# - nginx: Debian's package (`apt-get install nginx`). The package's own service is not used:
#   the benchmark runs `nginx -g 'daemon off;'` with a config of its own on a free port (on
#   machines where policy-rc.d does not forbid it, the package may also start the system service;
#   `systemctl stop nginx` if you do not want it).
# - LiteLLM: `litellm[proxy]` from PyPI in loadtest/.venv-litellm (a private venv, git-ignored).
# - matplotlib from PyPI in loadtest/.venv-plot, for docs/img/*.png.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
loadtest="$(dirname "$here")"
# Pinned so that figures from two runs compare the same peers.
LITELLM_SPEC="${LITELLM_SPEC:-litellm[proxy]==1.108.7}"
MATPLOTLIB_SPEC="${MATPLOTLIB_SPEC:-matplotlib==3.11.2}"
what="${1:-all}"

venv() { # venv DIR SPEC MODULE: a private venv holding SPEC, checked by importing MODULE
    local dir="$1" spec="$2" module="$3"
    if [[ -x "$dir/bin/python" ]] && "$dir/bin/python" -c "import $module" 2>/dev/null; then
        return 0
    fi
    echo "installing $spec into $dir ..." >&2
    python3 -m venv "$dir"
    echo '*' >"$dir/.gitignore" # the venv is never committed
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$spec"
}

if [[ "$what" == all || "$what" == nginx ]]; then
    if ! command -v nginx >/dev/null; then
        echo "installing nginx (Debian package) ..." >&2
        if [[ "$(id -u)" == 0 ]]; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx >&2 \
                || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx >&2; }
        else
            sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx >&2
        fi
    fi
    nginx -v 2>&1 | sed 's/^/found: /' >&2
fi
if [[ "$what" == all || "$what" == litellm ]]; then
    venv "$loadtest/.venv-litellm" "$LITELLM_SPEC" litellm.proxy.proxy_server
    echo "found: litellm $("$loadtest/.venv-litellm/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))')" >&2
fi
if [[ "$what" == all || "$what" == plot ]]; then
    venv "$loadtest/.venv-plot" "$MATPLOTLIB_SPEC" matplotlib
    echo "found: matplotlib $("$loadtest/.venv-plot/bin/python" -c 'import matplotlib; print(matplotlib.__version__)')" >&2
fi
