#!/usr/bin/env bash
# Installs what building and testing Wasmraft needs on Debian/Ubuntu, if it
# is missing: libclang (RocksDB's bindings), protoc (gRPC code), a Rust
# toolchain for wasm32-unknown-unknown (the plugins), and the toolchains of
# the C, Python and JavaScript examples (`cargo xtask examples`), and
# pinned etcdctl and etcd benchmark tool for the etcd API tests, and the
# clientv3 test program. Safe to run
# again.
#
# Prints `export` lines (guest toolchain, tools directory) on stdout;
# `scripts/test.sh` evaluates them. Everything else goes to stderr.
# `--no-etcdctl` skips etcd's tools (scripts/dev.sh does not need them). Two runs
# at once (test.sh and dev.sh in two shells) take turns.
set -euo pipefail

say() { echo "setup: $*" >&2; }

WANT_ETCDCTL=1
[ "${1:-}" = "--no-etcdctl" ] && WANT_ETCDCTL=0
exec 9>"${TMPDIR:-/tmp}/wasmraft-setup.lock"
if ! flock -n 9; then
  say "another setup is running; waiting for it"
  flock 9
fi

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else
    say "need root to run: $*"
    say "install these packages yourself, then run again."
    exit 1
  fi
}

APT_UPDATED=0
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    say "missing packages: $* (no apt-get here: install them with your package manager)"
    exit 1
  fi
  if [ "$APT_UPDATED" = 0 ]; then
    as_root apt-get update -qq >&2
    APT_UPDATED=1
  fi
  say "installing $*"
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >&2
}

# 1. System packages for the host build.
need=()
command -v cc >/dev/null 2>&1 || need+=(build-essential)
command -v clang >/dev/null 2>&1 || need+=(clang)
ldconfig -p 2>/dev/null | grep 'libclang[-.0-9]*\.so' >/dev/null || ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
if [ ${#need[@]} -gt 0 ]; then apt_install "${need[@]}"; fi

# 2. The wasm32 target for plugins: rustup's if it can be had, else
#    Debian's rustc-web, which compiles the standard library itself.
if command -v rustup >/dev/null 2>&1 && { rustup target list --installed 2>/dev/null | grep -x wasm32-unknown-unknown >/dev/null \
     || rustup target add wasm32-unknown-unknown >&2; }; then
  say "guest toolchain: rustup stable, wasm32-unknown-unknown"
  echo "unset WASMRAFT_GUEST_CARGO WASMRAFT_GUEST_CARGO_ARGS"
else
  say "rustup cannot provide wasm32-unknown-unknown; using Debian's rustc-web instead"
  [ -x /usr/bin/cargo ] && [ -d /usr/lib/rustlib/src ] || apt_install rustc-web cargo-web rust-web-src lld-22
  echo "export WASMRAFT_GUEST_CARGO=/usr/bin/cargo"
  echo "export WASMRAFT_GUEST_CARGO_ARGS='-Zbuild-std=std,panic_abort'"
fi

# 3. The examples in other languages (examples/plugins/, `cargo xtask
#    examples`): clang-14 for wasm32-wasi from Debian; componentize-py in a
#    venv and componentize-qjs under an npm prefix, pinned, in a tools
#    directory outside the repository.
COMPONENTIZE_PY=0.25.1
COMPONENTIZE_QJS=0.4.5
need=()
command -v clang-14 >/dev/null 2>&1 || need+=(clang-14)
command -v wasm-ld-14 >/dev/null 2>&1 || need+=(lld-14)
[ -f /usr/lib/wasm32-wasi/libc.a ] || need+=(wasi-libc)
ls /usr/lib/llvm-14/lib/clang/*/lib/wasi/libclang_rt.builtins-wasm32.a >/dev/null 2>&1 || need+=(libclang-rt-14-dev-wasm32)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
if [ ${#need[@]} -gt 0 ]; then apt_install "${need[@]}"; fi

TOOLS="${WASMRAFT_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmraft-tools}"
mkdir -p "$TOOLS"
if [ "$("$TOOLS/venv/bin/componentize-py" --version 2>/dev/null)" != "componentize-py $COMPONENTIZE_PY" ]; then
  say "installing componentize-py $COMPONENTIZE_PY into $TOOLS/venv"
  rm -rf "$TOOLS/venv"
  # Debian's python3 makes venvs only with python3-venv (ensurepip).
  if ! python3 -m venv "$TOOLS/venv" >/dev/null 2>&1; then
    rm -rf "$TOOLS/venv"
    apt_install python3-venv
    python3 -m venv "$TOOLS/venv" >&2
  fi
  "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY" >&2
fi
if ! grep -qs "\"version\": \"$COMPONENTIZE_QJS\"" "$TOOLS/npm/node_modules/componentize-qjs/package.json" \
   || [ ! -x "$TOOLS/npm/node_modules/.bin/componentize-qjs" ]; then
  say "installing componentize-qjs $COMPONENTIZE_QJS into $TOOLS/npm"
  rm -rf "$TOOLS/npm"
  npm install --prefix "$TOOLS/npm" --no-audit --no-fund --loglevel=error "componentize-qjs@$COMPONENTIZE_QJS" >&2
fi
# 4. etcdctl and etcd's benchmark tool, pinned, for the etcd API tests:
#    built from etcd's published Go modules through the Go module proxy (no
#    GitHub). Needs Go 1.21 or later (it fetches the Go release etcd asks
#    for itself); without one, a Go release is fetched from the module proxy
#    too.
ETCD_VERSION=v3.6.8
GO_BOOTSTRAP=go1.24.5
ETCD_TOOLS="$TOOLS/etcd-$ETCD_VERSION"
ETCDCTL="$ETCD_TOOLS/etcdctl"
ETCD_BENCHMARK="$ETCD_TOOLS/benchmark"
go_ok() { "$1" version 2>/dev/null | grep -E 'go1\.(2[1-9]|[3-9][0-9])' >/dev/null; }
GO=""
if [ "$WANT_ETCDCTL" = 1 ]; then
  for g in go /usr/local/go/bin/go "$TOOLS/go/bin/go"; do
    if go_ok "$g"; then GO=$g; break; fi
  done
  if [ -z "$GO" ]; then
    command -v curl >/dev/null 2>&1 && command -v unzip >/dev/null 2>&1 || apt_install curl unzip ca-certificates
    say "fetching $GO_BOOTSTRAP from the Go module proxy into $TOOLS/go"
    rm -rf "$TOOLS/go" "$TOOLS/go.zip"
    curl -fsSL -o "$TOOLS/go.zip" "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$GO_BOOTSTRAP.linux-$(dpkg --print-architecture).zip"
    (cd "$TOOLS" && unzip -q go.zip && mv "golang.org/toolchain@v0.0.1-$GO_BOOTSTRAP.linux-$(dpkg --print-architecture)" go && rm -rf golang.org go.zip)
    # Module zips keep no file modes: the go command marks these itself.
    chmod +x "$TOOLS"/go/bin/* "$TOOLS"/go/pkg/tool/*/*
    GO="$TOOLS/go/bin/go"
  fi
fi
if [ "$WANT_ETCDCTL" = 1 ] && { [ ! -x "$ETCDCTL" ] || [ ! -x "$ETCD_BENCHMARK" ]; }; then
  build="$ETCD_TOOLS/src"
  mkdir -p "$build"
  for tool in etcdctl:go.etcd.io/etcd/etcdctl/v3 benchmark:go.etcd.io/etcd/v3/tools/benchmark; do
    name=${tool%%:*} pkg=${tool#*:}
    [ -x "$ETCD_TOOLS/$name" ] && continue
    say "building etcd's $name $ETCD_VERSION with $("$GO" version) (a few minutes, once)"
    (
      cd "$build"
      export GOTOOLCHAIN=auto GOFLAGS=-mod=mod GO111MODULE=on
      [ -f go.mod ] || printf 'module wasmraft.local/etcdtools\n\ngo 1.21\n' > go.mod
      module=${pkg%/tools/benchmark}
      "$GO" get "$module@$ETCD_VERSION" >&2
      "$GO" build -trimpath -o "$ETCD_TOOLS/$name.tmp" "$pkg" >&2
      mv "$ETCD_TOOLS/$name.tmp" "$ETCD_TOOLS/$name"
    )
  done
fi
# 5. The clientv3 test program (testing/etcd-client-check), from this
#    checkout's sources each time (Go's build cache makes a rebuild quick).
CLIENT_CHECK="$ETCD_TOOLS/etcd-client-check"
if [ "$WANT_ETCDCTL" = 1 ]; then
  (
    cd "$(cd "$(dirname "$0")/.." && pwd)/testing/etcd-client-check"
    export GOTOOLCHAIN=auto GOFLAGS=-mod=mod GO111MODULE=on
    "$GO" build -trimpath -o "$CLIENT_CHECK.tmp" . >&2
    mv "$CLIENT_CHECK.tmp" "$CLIENT_CHECK"
  )
fi
if [ "$WANT_ETCDCTL" = 1 ]; then
  # sed reads all of it: a reader that stops early (head) would end
  # etcdctl with SIGPIPE, which pipefail turns into a failed setup.
  "$ETCDCTL" version | sed -n '1s/^/setup: /p' >&2
  printf 'export WASMRAFT_ETCD_CLIENT_CHECK=%q\n' "$CLIENT_CHECK"
  printf 'export WASMRAFT_ETCDCTL=%q\n' "$ETCDCTL"
  printf 'export WASMRAFT_ETCD_BENCHMARK=%q\n' "$ETCD_BENCHMARK"
fi
printf 'export WASMRAFT_TOOLS=%q\n' "$TOOLS"
