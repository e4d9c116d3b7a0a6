#!/usr/bin/env bash
# Starts a local Wasmraft node with the built-in KV plugin (installs the build
# dependencies first if they are missing). Arguments go to `wasmraft dev`,
# e.g. `scripts/dev.sh --data-dir ./data`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --no-etcdctl >/dev/null
cargo build --locked --release --bin wasmraft
exec "${CARGO_TARGET_DIR:-target}/release/wasmraft" dev "$@"
