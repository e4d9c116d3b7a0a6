#!/usr/bin/env bash
# How Wasmraft's cost grows with the work, on local clusters of `wasmraft
# run` (fsync on, the release build), driven by wasmraft-bench through
# `wasmraft.v1`: value size (256 B, 4 KiB, 64 KiB), concurrent clients (1
# to 1000: throughput and the p99 curve), 3 against 5 nodes, and a large
# state (STATE_KEYS keys, default 1,000,000: reads over it, and the time a
# new learner takes to install its snapshot and catch up). Prints a
# markdown table: req/s, p50 and p99 latency, the servers' CPU seconds and
# operations per server CPU-second.
#
#   benches/scaling.sh                     # values, clients, nodes
#   DIMENSIONS=state STATE_KEYS=200000 benches/scaling.sh
#
# Needs WASMRAFT_BIN (default target/release/wasmraft) and WASMRAFT_BENCH
# (default target/release/wasmraft-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${WASMRAFT_BIN:-${CARGO_TARGET_DIR:-target}/release/wasmraft}
BENCH=${WASMRAFT_BENCH:-${CARGO_TARGET_DIR:-target}/release/wasmraft-bench}
DIMENSIONS=${DIMENSIONS:-"values clients nodes"}
STATE_KEYS=${STATE_KEYS:-1000000}
# Seconds to leave the large state idle between its puts and its reads
# (the servers' CPU meanwhile is background work: RocksDB compaction).
STATE_SETTLE_S=${STATE_SETTLE_S:-0}
OUT=$(mktemp -d /tmp/wasmraft-scaling.XXXXXX)
PIDS=()
stop() { kill "${PIDS[@]}" 2>/dev/null || true; wait "${PIDS[@]}" 2>/dev/null || true; PIDS=(); }
trap 'stop; rm -rf "$OUT"' EXIT
CLK=$(getconf CLK_TCK)
cpu_of() { # pids... -> user+system CPU seconds
  local t=0 p rest
  for p in "$@"; do
    rest=$(sed 's/^.*) //' "/proc/$p/stat"); set -- $rest
    t=$((t + ${12} + ${13}))
  done
  awk -v t="$t" -v h="$CLK" 'BEGIN{printf "%.2f", t/h}'
}

start() { # nodes
  local n=$1 i peers=""
  rm -rf "$OUT/data"
  for i in $(seq "$n"); do peers+="$i = \"127.0.0.1:$((7478 + i))\""$'\n'; done
  EP=""
  for i in $(seq "$n"); do
    printf 'id = %s\ndata_dir = "%s/data/node-%s"\nlisten = "127.0.0.1:%s"\n[peers]\n%s' \
      "$i" "$OUT" "$i" $((7378 + i)) "$peers" > "$OUT/node$i.toml"
    "$BIN" --log-level warn run --config "$OUT/node$i.toml" 2> "$OUT/node$i.log" &
    PIDS+=($!)
    EP+="${EP:+,}127.0.0.1:$((7378 + i))"
  done
  for _ in $(seq 100); do "$BIN" status --endpoints "$EP" 2>/dev/null | grep -q 'leader: *[0-9]' && break; sleep 0.1; done
  # Let start-up work (the plugin's compilation) finish outside the rows.
  sleep 2
}

row() { # dimension setting conns clients total args...
  local dim=$1 setting=$2 conns=$3 clients=$4 total=$5; shift 5
  local c0 c1 json
  c0=$(cpu_of "${PIDS[@]}")
  json=$("$BENCH" --endpoints "$EP" --conns "$conns" --clients "$clients" --total "$total" --key-size 8 --json --quiet "$@")
  c1=$(cpu_of "${PIDS[@]}")
  python3 - "$dim" "$setting" "$conns/$clients" "$total" "$c0" "$c1" "$json" <<'PY'
import json, sys
dim, setting, cc, total, c0, c1, raw = sys.argv[1:]
j = json.loads(raw); cpu = float(c1) - float(c0); l = j["latency_ms"]
print(f"| {dim} | {setting} | {cc} | {total} | {j['requests_per_s']:,.0f} | {l['p50']:.2f} | {l['p99']:.2f} | {cpu:.2f} | {j['ok'] / cpu if cpu > 0 else 0:,.0f} |")
PY
}

echo "# machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ); fsync on; 8-byte keys"
echo
echo "| dimension | setting | conns/clients | total | req/s | p50 ms | p99 ms | server CPU s | ops per server CPU-s |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for dim in $DIMENSIONS; do
  case $dim in
  values)
    for v in 256 4096 65536; do
      total=$((v >= 65536 ? 2000 : v >= 4096 ? 10000 : 20000))
      start 3
      row values "put, $v B" 50 200 "$total" --value-size "$v" --sequential-keys --key-space "$total" put
      row values "get linearizable, $v B" 50 200 "$total" --value-size "$v" --sequential-keys --key-space "$total" range --consistency l
      stop
    done
    ;;
  clients)
    start 3
    for c in 1 10 100 1000; do
      conns=$((c < 200 ? c : 200)); total=$((c * 20 < 500 ? 500 : c * 20))
      row clients "put, clients: $c" "$conns" "$c" "$total" --value-size 256 --sequential-keys put
    done
    for c in 1 10 100 1000; do
      conns=$((c < 200 ? c : 200)); total=$((c * 20 < 500 ? 500 : c * 20))
      row clients "get linearizable, clients: $c" "$conns" "$c" "$total" --value-size 256 --sequential-keys --key-space 20000 range --consistency l
    done
    stop
    ;;
  nodes)
    for n in 3 5; do
      start "$n"
      row nodes "put, $n nodes" 200 1000 20000 --value-size 256 --sequential-keys put
      row nodes "get linearizable, $n nodes" 200 1000 20000 --value-size 256 --sequential-keys --key-space 20000 range --consistency l
      stop
    done
    ;;
  state)
    start 3
    row state "put into a growing state, to $STATE_KEYS keys" 200 1000 "$STATE_KEYS" --value-size 256 --sequential-keys put
    if [ "$STATE_SETTLE_S" -gt 0 ]; then
      c0=$(cpu_of "${PIDS[@]}"); sleep "$STATE_SETTLE_S"; c1=$(cpu_of "${PIDS[@]}")
      awk -v a="$c0" -v b="$c1" -v s="$STATE_SETTLE_S" 'BEGIN { printf "| state | idle %d s after the puts | - | - | - | - | - | %.2f | - |\n", s, b - a }'
    fi
    row state "get linearizable, $STATE_KEYS keys" 200 1000 50000 --value-size 256 --sequential-keys --key-space "$STATE_KEYS" range --consistency l
    row state "get eventual, $STATE_KEYS keys" 200 1000 50000 --value-size 256 --sequential-keys --key-space "$STATE_KEYS" range --consistency e
    # A new learner: it catches up by installing the leader's snapshot.
    peers=""
    for i in 1 2 3 4; do peers+="$i = \"127.0.0.1:$((7478 + i))\""$'\n'; done
    printf 'id = 4\ndata_dir = "%s/data/node-4"\nlisten = "127.0.0.1:7382"\njoin = true\n[peers]\n%s' "$OUT" "$peers" > "$OUT/node4.toml"
    "$BIN" --log-level info run --config "$OUT/node4.toml" 2> "$OUT/node4.log" &
    PIDS+=($!)
    sleep 1
    commit=$("$BIN" status --endpoints "$EP" | sed -n 's/^commit: *//p' | head -1)
    t0=$(date +%s.%N)
    "$BIN" member add-learner 4 127.0.0.1:7482 --endpoints "$EP" > /dev/null
    applied=0
    for _ in $(seq 6000); do
      applied=$("$BIN" status --endpoints 127.0.0.1:7382 2>/dev/null | sed -n 's/^applied: *//p' | head -1)
      [ "${applied:-0}" -ge "$commit" ] && break
      sleep 0.1
    done
    t1=$(date +%s.%N)
    bytes=$(du -sb "$OUT/data/node-4" | cut -f1)
    installs=$(grep -c "installed a snapshot" "$OUT/node4.log" || true)
    awk -v a="$t0" -v b="$t1" -v n="$STATE_KEYS" -v mb="$bytes" -v s="$installs" 'BEGIN {
      printf "| state | a new learner catches up, %d keys (%d snapshot install(s), %.0f MiB on disk) | - | - | %.1f s | - | - | - | - |\n", n, s, mb / 1048576, b - a }'
    stop
    ;;
  *) echo "unknown dimension $dim (values, clients, nodes, state)" >&2; exit 2 ;;
  esac
done
