#!/usr/bin/env bash
# What a keyspace hash check costs the writes around it: two `wasmraft`
# binaries, alternated, each time a fresh 3-node cluster on loopback driven
# by etcd's benchmark tool. Per run: put 200/1000 of KEYS sequential keys
# into the empty cluster (periodic checks as the state grows), then put 1/1
# to the leader with one `wasmraft check` 2 s in. One line per run.
#
#   benches/check-stall.sh OLD_BIN NEW_BIN
#   ROUNDS=1 KEYS=100000 benches/check-stall.sh OLD_BIN NEW_BIN
#
# Needs etcd's benchmark tool (../shared/tools/etcd-cluster.sh install, or
# ETCD_BIN_DIR). Both fsync before acknowledging.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: benches/check-stall.sh OLD_BIN NEW_BIN" >&2; exit 2; }
BENCH=${ETCD_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/peers/etcd/bin}/benchmark
ROUNDS=${ROUNDS:-2}
KEYS=${KEYS:-300000}
EP=127.0.0.1:7379,127.0.0.1:7380,127.0.0.1:7381

# req/s, p99 and slowest of one benchmark run's output.
summary() { awk '/Slowest:/{s=$2} /Requests\/sec:/{r=$2} /99% in/{p=$3} END{printf "req/s %.0f, p99 %.1f ms, slowest %.1f ms", r, p*1000, s*1000}'; }

pids=()
out=
trap 'kill "${pids[@]}" 2>/dev/null || true; [ -z "$out" ] || rm -rf "$out"' EXIT

one() { # bin label
  local bin=$1 label=$2 grow single leader
  pids=()
  out=$(mktemp -d /tmp/wasmraft-check-stall.XXXXXX)
  for i in 1 2 3; do
    printf 'id = %s\ndata_dir = "%s/node-%s"\nlisten = "127.0.0.1:%s"\n[peers]\n1 = "127.0.0.1:7479"\n2 = "127.0.0.1:7480"\n3 = "127.0.0.1:7481"\n' \
      "$i" "$out" "$i" "$((7378 + i))" > "$out/node$i.toml"
    "$bin" --log-level warn run --config "$out/node$i.toml" 2> "$out/node$i.log" &
    pids+=($!)
  done
  for _ in $(seq 100); do "$bin" status --endpoints $EP 2>/dev/null | grep -q 'leader:   [0-9]' && break; sleep 0.1; done
  grow=$("$BENCH" --endpoints $EP --conns 200 --clients 1000 put --key-size 8 --val-size 256 \
    --sequential-keys --key-space-size "$KEYS" --total "$KEYS" 2>/dev/null | summary)
  leader=$(for p in 7379 7380 7381; do
    if "$bin" status --endpoints 127.0.0.1:$p 2>/dev/null | grep -q '^role: *leader'; then echo 127.0.0.1:$p; fi
  done | head -1)
  (sleep 2; "$bin" check --endpoints $EP >/dev/null 2>&1 || true) &
  single=$("$BENCH" --endpoints "$leader" --conns 1 --clients 1 put --key-size 8 --val-size 256 \
    --total 4000 2>/dev/null | summary)
  wait $!
  echo "$label | put 200/1000 to $KEYS keys: $grow | put 1/1 with a check: $single"
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$out"
}

echo "# machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
for round in $(seq "$ROUNDS"); do
  one "$1" "old r$round"
  one "$2" "new r$round"
done
