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
cargo test --manifest-path plugins/Cargo.toml --locked -p wasmraft-sdk -p bank
cargo test --manifest-path plugins/Cargo.toml --locked -p wasmraft-sdk -p reminders -p wasmraft-kv --features wasmraft-sdk/timers

# The release profile, as `cargo install` and the quick start build it: one
# build of RocksDB and wasmtime serves the tests, the quick start and the
# install line below (Cargo.toml keeps our crates' overflow checks and
# assertions on in it).
echo "==> workspace tests"
cargo test --workspace --locked --release

# The README's set-up lines that cannot run inside `cargo test`, as written
# (read from the README): the quick start's `./scripts/dev.sh`, and the
# install line, whose install root and build directory the environment
# moves out of ~/.cargo. Each must bring up a local cluster that serves a
# put and a get.
readme_line() { grep -m1 -- "$1" README.md | sed 's/  *#.*$//'; }
check_dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$check_dir"' EXIT
# serves LOG WASMRAFT: waits for the cluster the last background job
# started, then puts and gets through it, and stops the job.
serves() {
  local log=$1 wasmraft=$2 pid=$! answer
  for _ in $(seq 1 300); do
    "$wasmraft" status --timeout 1s >/dev/null 2>&1 && break
    sleep 0.3
  done
  "$wasmraft" put readme-check ok >/dev/null && answer=$("$wasmraft" get readme-check) || answer=
  kill "$pid"; wait "$pid" 2>/dev/null || true
  if [ "$answer" != ok ]; then
    echo "test.sh: no answer from the cluster (got '$answer'); its log:" >&2
    cat "$log" >&2
    exit 1
  fi
}

echo "==> the README's quick start: ./scripts/dev.sh"
quick_start=$(readme_line '^\./scripts/dev\.sh')
bash -c "$quick_start" >"$check_dir/dev.log" 2>&1 &
serves "$check_dir/dev.log" "${CARGO_TARGET_DIR:-target}/release/wasmraft"

# It reuses the release build above (cargo install builds in a temporary
# directory unless told the target directory).
echo "==> the README's install line: an optimised release build"
install_line=$(readme_line '^scripts/setup.sh --no-etcdctl .*cargo install')
CARGO_INSTALL_ROOT="$check_dir/install" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" bash -ec "$install_line"
installed="$check_dir/install/bin/wasmraft"
"$installed" dev >"$check_dir/installed.log" 2>&1 &
serves "$check_dir/installed.log" "$installed"
echo "installed $("$installed" --version): $(( $(stat -c %s "$installed") / 1048576 )) MiB; both served a put and a get"
