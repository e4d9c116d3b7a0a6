#!/usr/bin/env bash
# Runs every test of Wasmraft: installs what is missing (scripts/setup.sh),
# rebuilds every plugin from source and checks the embedded KV plugin is up
# to date, then runs the workspace's tests. Long simulations: see the README.
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(scripts/setup.sh)"

echo "==> building plugins from source"
cargo xtask plugins

echo "==> workspace tests"
cargo test --workspace --locked
