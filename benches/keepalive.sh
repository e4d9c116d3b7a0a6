#!/usr/bin/env bash
# What keeping etcd leases alive costs: a local 3-node cluster (`wasmraft
# run`, fsync on), LEASES leases of TTL seconds kept alive for DURATION
# through etcd's Lease API, every keep-alive stream to the leader (as
# `--target-leader`). Prints keep-alives per second, the leader's log
# entries per second and its CPU (from /proc).
#
#   benches/keepalive.sh                            # 10,000 leases, 5 s TTL, 30 s
#   LEASES=1000 DURATION=10s benches/keepalive.sh
#
# Needs the binaries: WASMRAFT_BIN (default target/release/wasmraft) and
# WASMRAFT_BENCH (default target/debug/wasmraft-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
LEASES=${LEASES:-10000}
TTL=${TTL:-5}
DURATION=${DURATION:-30s}
CONNS=${CONNS:-16}
BIN=${WASMRAFT_BIN:-${CARGO_TARGET_DIR:-target}/release/wasmraft}
BENCH=${WASMRAFT_BENCH:-${CARGO_TARGET_DIR:-target}/debug/wasmraft-bench}
OUT=$(mktemp -d /tmp/wasmraft-keepalive.XXXXXX)
PORTS=(7379 7380 7381)
PIDS=()
for i in 1 2 3; do
  cat > "$OUT/node$i.toml" <<TOML
id = $i
data_dir = "$OUT/node-$i"
listen = "127.0.0.1:${PORTS[$((i-1))]}"
[peers]
1 = "127.0.0.1:7479"
2 = "127.0.0.1:7480"
3 = "127.0.0.1:7481"
TOML
  "$BIN" --log-level warn run --config "$OUT/node$i.toml" 2> "$OUT/node$i.log" &
  PIDS+=($!)
done
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$OUT"' EXIT
EP=127.0.0.1:7379,127.0.0.1:7380,127.0.0.1:7381
leader=
for _ in $(seq 100); do
  leader=$("$BIN" status --endpoints $EP 2>/dev/null | sed -n 's/^leader: *\([0-9][0-9]*\).*/\1/p' | head -1)
  [ -n "$leader" ] && break
  sleep 0.1
done
[ -n "$leader" ] || { echo "no leader" >&2; exit 1; }
echo "# machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ); leader: node $leader"
"$BENCH" --endpoints "127.0.0.1:${PORTS[$((leader-1))]}" --conns "$CONNS" keep-alive \
  --leases "$LEASES" --ttl "$TTL" --duration "$DURATION" --cpu-pids "${PIDS[$((leader-1))]}"
