#!/usr/bin/env bash
# What keeping etcd leases alive costs, Wasmraft against etcd in one run:
# a local 3-member cluster of each (fsync on), LEASES leases of TTL seconds
# kept alive for DURATION through etcd's Lease API, every keep-alive stream
# to the leader (`wasmraft-bench keep-alive`, the same client for both).
# Prints keep-alives per second, the leader's Raft log entries per second and
# its CPU (from /proc), for each system.
#
#   benches/keepalive.sh                            # 10,000 leases, 5 s TTL, 30 s
#   LEASES=1000 DURATION=10s benches/keepalive.sh
#   SYSTEMS=wasmraft benches/keepalive.sh           # without etcd
#
# Needs the binaries: WASMRAFT_BIN (default target/release/wasmraft) and
# WASMRAFT_BENCH (default target/release/wasmraft-bench), and etcd's tools via
# ../shared/tools (etcd-cluster.sh installs them) or ETCD_TOOLS.
set -euo pipefail
cd "$(dirname "$0")/.."
LEASES=${LEASES:-10000}
TTL=${TTL:-5}
DURATION=${DURATION:-30s}
CONNS=${CONNS:-16}
SYSTEMS=${SYSTEMS:-"etcd wasmraft"}
TOOLS=${ETCD_TOOLS:-../shared/tools}
BIN=${WASMRAFT_BIN:-${CARGO_TARGET_DIR:-target}/release/wasmraft}
BENCH=${WASMRAFT_BENCH:-${CARGO_TARGET_DIR:-target}/release/wasmraft-bench}
OUT=$(mktemp -d /tmp/wasmraft-keepalive.XXXXXX)
PIDS=()
cleanup() {
  kill "${PIDS[@]}" 2>/dev/null || true
  [ -f "$OUT/etcd/etcd-cluster.pids" ] && "$TOOLS/etcd-cluster.sh" stop "$OUT/etcd" >/dev/null 2>&1 || true
  rm -rf "$OUT"
}
trap cleanup EXIT
echo "# machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"

keep_alive() { # system endpoint leader-pid
  echo "## $1: $LEASES leases, TTL $TTL s, $DURATION, $CONNS streams to the leader"
  "$BENCH" --endpoints "$2" --conns "$CONNS" keep-alive \
    --leases "$LEASES" --ttl "$TTL" --duration "$DURATION" --cpu-pids "$3" 2> "$OUT/$1.progress"
}

for system in $SYSTEMS; do
  case $system in
  etcd)
    "$TOOLS/etcd-cluster.sh" start "$OUT/etcd" >/dev/null
    mapfile -t EPIDS < <("$TOOLS/etcd-cluster.sh" pids "$OUT/etcd")
    EEP=$("$TOOLS/etcd-cluster.sh" endpoints "$OUT/etcd")
    ETCDCTL=$(dirname "$(command -v etcd 2>/dev/null || echo "${ETCD_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/peers/etcd/bin}/etcd")")/etcdctl
    leader=
    for _ in $(seq 100); do
      # A row per member, in order; "is leader" is its only "true" field.
      leader=$("$ETCDCTL" --endpoints "$EEP" endpoint status 2>/dev/null | awk -F', ' '{ for (i = 1; i <= NF; i++) if ($i == "true") { print NR; exit } }')
      [ -n "$leader" ] && break
      sleep 0.1
    done
    [ -n "$leader" ] || { echo "no etcd leader" >&2; exit 1; }
    keep_alive etcd "$(echo "$EEP" | cut -d, -f"$leader" | sed 's|^http://||')" "${EPIDS[$((leader-1))]}"
    "$TOOLS/etcd-cluster.sh" stop "$OUT/etcd" >/dev/null || true
    ;;
  wasmraft)
    PORTS=(7379 7380 7381)
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
    EP=127.0.0.1:7379,127.0.0.1:7380,127.0.0.1:7381
    leader=
    for _ in $(seq 100); do
      leader=$("$BIN" status --endpoints $EP 2>/dev/null | sed -n 's/^leader: *\([0-9][0-9]*\).*/\1/p' | head -1)
      [ -n "$leader" ] && break
      sleep 0.1
    done
    [ -n "$leader" ] || { echo "no leader" >&2; exit 1; }
    keep_alive wasmraft "127.0.0.1:${PORTS[$((leader-1))]}" "${PIDS[$((leader-1))]}"
    kill "${PIDS[@]}" 2>/dev/null || true
    wait "${PIDS[@]}" 2>/dev/null || true
    PIDS=()
    ;;
  *) echo "unknown system $system (etcd, wasmraft)" >&2; exit 2 ;;
  esac
done
