#!/usr/bin/env bash
# Runs the same workloads against a local 3-member etcd cluster and a local
# 3-node Wasmraft cluster, back to back, and prints one table row per system
# and workload: req/s, latency, and operations per server CPU-second (the
# three servers' user+system CPU from /proc). Wasmraft is driven twice: by
# etcd's own benchmark tool through etcd's API (the same client as etcd's
# rows: "wasmraft (etcd tool) raw"), and by wasmraft-bench through
# `wasmraft.v1` (which also has lease and eventual reads, and reads at the
# leader). etcd's tool runs workloads a to e of ../shared/tools/etcd-bench.sh
# and txn-put (benches/etcd-txn-put.sh) on both.
#
#   benches/compare.sh                 # defaults below
#   TOTAL=100000 A_TOTAL=10000 benches/compare.sh
#   REPORT_DIR=benches/reports/latest benches/compare.sh   # the report the README links
#
# The machine drifts by 10-30% within minutes, so etcd's tool runs in
# ROUNDS rounds (default 3), each on fresh clusters of both systems, in
# alternating order (etcd first in odd rounds); the report gives each
# workload's median over the rounds and the median of its per-round ratios,
# with their range. wasmraft-bench runs once, after the last round.
#
# It ends with a report (benches/report.py): REPORT_DIR/report.md, a table
# of every workload with the ratios against etcd, and PNG charts of
# throughput, CPU efficiency and latency distributions (matplotlib, in a
# virtualenv under ~/.cache/wasmraft-tools that the first run creates with
# pip). REPORT_DIR defaults to OUT_DIR/report.
#
# Needs: target/release/wasmraft and wasmraft-bench (cargo build --release --workspace),
# and etcd's tools via ../shared/tools (etcd-cluster.sh installs them), or
# ETCD_TOOLS pointing at that directory. Both systems fsync before acking.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${ETCD_TOOLS:-../shared/tools}
TOTAL=${TOTAL:-50000}
A_TOTAL=${A_TOTAL:-3000}
CONNS=${CONNS:-200}
CLIENTS=${CLIENTS:-1000}
ROUNDS=${ROUNDS:-3}
OUT=${OUT_DIR:-$(mktemp -d /tmp/wasmraft-compare.XXXXXX)}
mkdir -p "$OUT"
REPORT=${REPORT_DIR:-$OUT/report}
exec > >(tee "$OUT/compare.txt")
BIN=${WASMRAFT_BIN:-${CARGO_TARGET_DIR:-target}/release/wasmraft}
BENCH=${WASMRAFT_BENCH:-${CARGO_TARGET_DIR:-target}/release/wasmraft-bench}
CLK=$(getconf CLK_TCK)

cpu_of() { # pids... -> seconds of user+system CPU
  local t=0 p rest
  for p in "$@"; do
    rest=$(sed 's/^.*) //' "/proc/$p/stat"); set -- $rest
    t=$((t + ${12} + ${13}))
  done
  awk -v t="$t" -v h="$CLK" 'BEGIN{printf "%.2f", t/h}'
}

echo "# machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "# system | workload | conns/clients | total | req/s | avg ms | p50 ms | p99 ms | server CPU s | ops per server CPU-s"

# Each system starts with the other's writes on disk: the dirty pages one
# leaves behind would slow the other's fsyncs.
settle_disk() { sync; sleep 2; }

# ---- etcd ----
etcd_round() { # round
  local r=$1 pids
  rm -rf "$OUT/etcd"
  settle_disk
  "$TOOLS/etcd-cluster.sh" start "$OUT/etcd" >/dev/null
  mapfile -t pids < <("$TOOLS/etcd-cluster.sh" pids "$OUT/etcd")
  ETCD_PIDS="${pids[*]}" WORKLOADS="a b c d e" TOTAL=$TOTAL A_TOTAL=$A_TOTAL CONNS=$CONNS CLIENTS=$CLIENTS \
    OUT_DIR="$OUT/etcd-raw/r$r" "$TOOLS/etcd-bench.sh" > "$OUT/etcd-r$r.txt" 2> "$OUT/etcd.err" || { cat "$OUT/etcd.err"; exit 1; }
  # txn-put, which etcd-bench.sh does not run: the same tool, the same columns.
  sleep 2
  ENDPOINTS=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379 SERVER_PIDS="${pids[*]}" TOTAL=$TOTAL CONNS=$CONNS \
    CLIENTS=$CLIENTS OUT_DIR="$OUT/etcd-raw/r$r" benches/etcd-txn-put.sh >> "$OUT/etcd-r$r.txt" 2>> "$OUT/etcd.err" \
    || { cat "$OUT/etcd.err"; exit 1; }
  "$TOOLS/etcd-cluster.sh" stop "$OUT/etcd" >/dev/null
  sed "s/^/# etcd raw r$r: /" "$OUT/etcd-r$r.txt"
}

# ---- wasmraft ----
PORTS=(7379 7380 7381)
PEERS=$(printf '%s = "127.0.0.1:%s"\n' 1 7479 2 7480 3 7481)
EP=127.0.0.1:7379,127.0.0.1:7380,127.0.0.1:7381
WPIDS=()
trap 'kill "${WPIDS[@]}" 2>/dev/null || true' EXIT
# A fresh cluster each time, as etcd's: data left by an earlier run would be
# replayed and measured too.
start_wasmraft() {
  rm -rf "$OUT/wasmraft"
  settle_disk
  WPIDS=()
  for i in 1 2 3; do
    cat > "$OUT/node$i.toml" <<TOML
id = $i
data_dir = "$OUT/wasmraft/node-$i"
listen = "127.0.0.1:${PORTS[$((i-1))]}"
[peers]
$PEERS
TOML
    "$BIN" --log-level warn run --config "$OUT/node$i.toml" 2> "$OUT/node$i.log" &
    WPIDS+=($!)
  done
  for _ in $(seq 100); do "$BIN" status --endpoints $EP 2>/dev/null | grep -q 'leader:   [0-9]' && break; sleep 0.1; done
}
stop_wasmraft() {
  kill "${WPIDS[@]}" 2>/dev/null || true
  wait "${WPIDS[@]}" 2>/dev/null || true
}

run() { # name conns clients total args...
  local name=$1 conns=$2 clients=$3 total=$4; shift 4
  local c0 c1 json
  c0=$(cpu_of "${WPIDS[@]}")
  json=$("$BENCH" --endpoints $EP --conns "$conns" --clients "$clients" --total "$total" \
    --key-size 8 --value-size 256 --json --quiet "$@")
  c1=$(cpu_of "${WPIDS[@]}")
  echo "$json" > "$OUT/wasmraft-$name.json"
  python3 - "$name" "$conns/$clients" "$total" "$c0" "$c1" "$json" <<'PY'
import json, sys
name, cc, total, c0, c1, raw = sys.argv[1:]
j = json.loads(raw); cpu = float(c1) - float(c0); l = j["latency_ms"]
print(f"wasmraft | {name} | {cc} | {total} | {j['requests_per_s']:.0f} | {l['avg']:.2f} | {l['p50']:.2f} | {l['p99']:.2f} | {cpu:.2f} | {j['ok']/cpu if cpu > 0 else 0:.0f}")
PY
}
# The same client for both systems: etcd's benchmark tool through etcd's
# API, which Wasmraft serves over the KV plugin.
wasmraft_round() { # round
  local r=$1 txt="$OUT/wasmraft-etcd-tool-r$1.txt"
  start_wasmraft
  ETCD_PIDS="${WPIDS[*]}" WORKLOADS="a b c d e" TOTAL=$TOTAL A_TOTAL=$A_TOTAL CONNS=$CONNS CLIENTS=$CLIENTS \
    OUT_DIR="$OUT/wasmraft-etcd-tool-raw/r$r" "$TOOLS/etcd-bench.sh" "$EP" > "$txt" 2> "$OUT/wasmraft-etcd-tool.err" \
    || { cat "$OUT/wasmraft-etcd-tool.err"; exit 1; }
  sleep 2
  ENDPOINTS=$EP SERVER_PIDS="${WPIDS[*]}" TOTAL=$TOTAL CONNS=$CONNS CLIENTS=$CLIENTS \
    OUT_DIR="$OUT/wasmraft-etcd-tool-raw/r$r" benches/etcd-txn-put.sh >> "$txt" \
    2>> "$OUT/wasmraft-etcd-tool.err" || { cat "$OUT/wasmraft-etcd-tool.err"; exit 1; }
  stop_wasmraft
  sed "s/^/# wasmraft (etcd tool) raw r$r: /" "$txt"
}

for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then etcd_round "$r"; wasmraft_round "$r"; else wasmraft_round "$r"; etcd_round "$r"; fi
done

start_wasmraft
run put-1 1 1 "$A_TOTAL" --sequential-keys --target-leader put
run put 200 1000 "$TOTAL" --sequential-keys put
run range-l 200 1000 "$TOTAL" --key-space "$TOTAL" range --consistency l
run range-s 200 1000 "$TOTAL" --key-space "$TOTAL" range --consistency s
run range-e 200 1000 "$TOTAL" --key-space "$TOTAL" range --consistency e
# At the leader, where a lease read needs no round trip (a follower serves
# one as a linearizable read, through the leader).
run range-l-leader 200 1000 "$TOTAL" --key-space "$TOTAL" --target-leader range --consistency l
run range-s-leader 200 1000 "$TOTAL" --key-space "$TOTAL" --target-leader range --consistency s
echo "# raw output in $OUT"
stop_wasmraft
benches/plot-env.sh benches/report.py "$OUT" "$REPORT"
