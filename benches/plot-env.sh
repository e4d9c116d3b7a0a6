#!/usr/bin/env bash
# Runs a Python script with matplotlib: from a virtualenv under
# ~/.cache/wasmraft-tools/plot-venv, created with pip on first use.
#
#   benches/plot-env.sh benches/report.py RUN_DIR OUT_DIR
set -euo pipefail
VENV=${WASMRAFT_PLOT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmraft-tools/plot-venv}
if ! "$VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
  echo "setting up matplotlib in $VENV (once)" >&2
  python3 -m venv "$VENV" >&2 || { echo "python3 -m venv failed: apt-get install python3-venv" >&2; exit 1; }
  "$VENV/bin/pip" install --quiet 'matplotlib>=3.8,<4' >&2
fi
exec "$VENV/bin/python" "$@"
