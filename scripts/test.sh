#!/usr/bin/env bash
# Runs every test of Wasmraft: installs what is missing (scripts/setup.sh),
# rebuilds every plugin and the examples in other languages from source,
# checks the embedded KV plugin is up to date, then runs the workspace's
# tests. Long simulations: see the README.
set -euo pipefail
cd "$(dirname "$0")/.."

# A setup that fails stops here: the tests need what it installs.
if ! setup_env=$(scripts/setup.sh); then
  echo "test.sh: scripts/setup.sh failed (see above); not running the tests" >&2
  exit 1
fi
eval "$setup_env"

echo "==> building plugins from source"
cargo xtask plugins
echo "==> building the C, Python and JavaScript examples"
cargo xtask examples

echo "==> SDK doc tests and guest unit tests (native)"
cargo test --manifest-path plugins/Cargo.toml --locked -p wasmraft-sdk -p bank -p wasmraft-kv

echo "==> workspace tests"
cargo test --workspace --locked
