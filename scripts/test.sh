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

# The README's install line, as written (read from the README), then the
# installed binary runs a local cluster and answers. Its install root and
# build directory are moved out of ~/.cargo (the environment, not the
# line); an optimised build from nothing takes about 22 minutes on two
# cores, and a rerun reuses target/release.
echo "==> the README's install line: an optimised release build"
install_line=$(grep -m1 '^scripts/setup.sh --no-etcdctl .*cargo install' README.md)
install_root=$(mktemp -d)
trap 'rm -rf "$install_root"' EXIT
CARGO_INSTALL_ROOT="$install_root" CARGO_TARGET_DIR="$PWD/target" bash -ec "$install_line"
wasmraft_installed="$install_root/bin/wasmraft"
"$wasmraft_installed" dev --data-dir "$install_root/dev" >"$install_root/dev.log" 2>&1 &
dev_pid=$!
for _ in $(seq 1 200); do
  "$wasmraft_installed" status --timeout 1s >/dev/null 2>&1 && break
  sleep 0.3
done
"$wasmraft_installed" put install-check ok >/dev/null
answer=$("$wasmraft_installed" get install-check)
kill "$dev_pid"; wait "$dev_pid" || true
if [ "$answer" != ok ]; then
  echo "test.sh: the installed binary answered ${answer@Q} instead of 'ok'" >&2
  cat "$install_root/dev.log" >&2
  exit 1
fi
echo "installed $("$wasmraft_installed" --version): $(( $(stat -c %s "$wasmraft_installed") / 1048576 )) MiB, served a put and a get"
