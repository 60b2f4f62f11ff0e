#!/usr/bin/env bash
# Install everything into ./.venv, then start the server or run the tests.
#
#   ./run.sh serve [main.py flags]   install, then start the server (CPU mode without a GPU)
#   ./run.sh test  [pytest args]     install, then run the test suite
#   ./run.sh install                 install only
#
# torch: a host that already has it (a GPU host) shares it through the venv; otherwise
# TORCH_SPEC (default torch==2.13.0) is installed; set PIP_INDEX_URL or TORCH_INDEX_URL to
# pick a build, e.g. TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu for the small one.
set -euo pipefail
cd "$(dirname "$0")"

VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
PY="$VENV/bin/python"

install() {
    if [ ! -x "$PY" ]; then
        if python3 -c "import torch" 2>/dev/null; then
            python3 -m venv --system-site-packages "$VENV"
        else
            python3 -m venv "$VENV"
        fi
    fi
    if ! "$PY" -c "import torch" 2>/dev/null; then
        echo "installing $TORCH_SPEC ..."
        "$PY" -m pip install -q ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC"
    fi
    "$PY" -m pip install -q -e ./client -e ".[worker,test]"
}

command=${1:-}
[ $# -gt 0 ] && shift
case "$command" in
    install) install ;;
    serve) install; exec "$PY" main.py "$@" ;;
    test) install; exec "$PY" -m pytest "$@" ;;
    *) echo "usage: ./run.sh serve|test|install [args]" >&2; exit 2 ;;
esac
