#!/usr/bin/env bash
# The throughput cost of TLS: the same workloads against a local 3-node
# `wasmraft dev` cluster without TLS and with mutual TLS on every port
# (`wasmraft dev --tls`), back to back, alternating ROUNDS times, and the
# ratio of each pair.
#
#   benches/tls-cost.sh                  # defaults below
#   TOTAL=20000 ROUNDS=3 benches/tls-cost.sh
#
# Needs target/release/wasmraft and wasmraft-bench (cargo build --release --workspace).
set -euo pipefail
cd "$(dirname "$0")/.."
TOTAL=${TOTAL:-10000}
CONNS=${CONNS:-20}
CLIENTS=${CLIENTS:-100}
ROUNDS=${ROUNDS:-2}
BIN=${WASMRAFT_BIN:-${CARGO_TARGET_DIR:-target}/release/wasmraft}
BENCH=${WASMRAFT_BENCH:-${CARGO_TARGET_DIR:-target}/release/wasmraft-bench}
OUT=$(mktemp -d /tmp/wasmraft-tls-cost.XXXXXX)
trap 'kill $DEV 2>/dev/null || true; rm -rf "$OUT"' EXIT

start() { # data dir, extra flags -> sets DEV and ENV_LINE
  "$BIN" --log-level warn dev --data-dir "$1" "${@:2}" > "$1.out" 2> "$1.err" &
  DEV=$!
  for _ in $(seq 300); do grep -q '^  try:' "$1.out" 2>/dev/null && return; sleep 0.1; done
  echo "wasmraft dev did not start:"; cat "$1.err"; exit 1
}

run() { # label, bench args...
  local label=$1; shift
  "$BENCH" --endpoints 127.0.0.1:7379,127.0.0.1:7380,127.0.0.1:7381 --conns "$CONNS" --clients "$CLIENTS" \
    --total "$TOTAL" --key-size 8 --value-size 256 --json --quiet "$@" |
    python3 -c "import json,sys; d=json.load(sys.stdin); print(d['requests_per_s'])"
}

echo "# machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "# round | workload | plain req/s | mutual TLS req/s | TLS / plain"
for round in $(seq "$ROUNDS"); do
  rm -rf "$OUT/plain" "$OUT/tls"
  start "$OUT/plain"
  plain_put=$(run put put); plain_get=$(run get range a --consistency l)
  kill $DEV; wait $DEV 2>/dev/null || true
  start "$OUT/tls" --tls
  eval "$(grep -o 'export .*' "$OUT/tls.out")"
  tls_put=$(run put put); tls_get=$(run get range a --consistency l)
  kill $DEV; wait $DEV 2>/dev/null || true
  unset WASMRAFT_CACERT WASMRAFT_CERT WASMRAFT_KEY
  for w in put get; do
    p=$(eval echo \$plain_$w); t=$(eval echo \$tls_$w)
    awk -v r="$round" -v w="$w" -v p="$p" -v t="$t" 'BEGIN{printf "%s | %s | %.0f | %.0f | %.2f\n", r, w, p, t, t/p}'
  done
done
