#!/usr/bin/env bash
# Soak: three `wasmraft run` processes under a mixed load (puts and
# linearizable reads from wasmraft-bench) for DURATION seconds, with the
# leader killed (kill -9) and restarted every KILL_EVERY seconds. Samples
# each node's RSS every 10 s into rss.csv (in the run's directory) and
# prints a summary: the
# RSS of each node after warm-up, at the end, and its peak; the bench
# runs' errors. Stops by itself.
#
#   benches/soak.sh            # 600 s, a kill every 60 s
#   DURATION=120 benches/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-600}
KILL_EVERY=${KILL_EVERY:-60}
target=${CARGO_TARGET_DIR:-target}
bin=$target/release/wasmraft
bench=$target/release/wasmraft-bench
[ -x "$bin" ] && [ -x "$bench" ] || cargo build --locked --release --bin wasmraft --bin wasmraft-bench
dir=$(mktemp -d -t wasmraft-soak-XXXX)
endpoints=127.0.0.1:7579,127.0.0.1:7580,127.0.0.1:7581
for i in 1 2 3; do
  cat > "$dir/n$i.toml" <<TOML
id = $i
data_dir = "$dir/n$i"
listen = "127.0.0.1:$((7578 + i))"
peer_listen = "127.0.0.1:$((7678 + i))"

[peers]
1 = "127.0.0.1:7679"
2 = "127.0.0.1:7680"
3 = "127.0.0.1:7681"
TOML
done
declare -A pid
start() { "$bin" run --config "$dir/n$1.toml" 2>> "$dir/n$1.log" & pid[$1]=$!; }
cleanup() { kill "${pid[@]}" $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
for i in 1 2 3; do start "$i"; done
sleep 3
leader() {
  for i in 1 2 3; do
    if "$bin" status --endpoints "127.0.0.1:$((7578 + i))" 2>/dev/null | grep -q '^role: *leader'; then echo "$i"; return; fi
  done
}
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

end=$((SECONDS + DURATION))
( while [ $SECONDS -lt $end ]; do
    "$bench" --endpoints "$endpoints" --conns 4 --clients 32 --total 20000 --key-space 10000 --quiet --json put || true
  done > "$dir/put.jsonl" ) &
loads=($!)
( while [ $SECONDS -lt $end ]; do
    "$bench" --endpoints "$endpoints" --conns 4 --clients 32 --total 20000 --key-space 10000 --quiet --json range --consistency l || true
  done > "$dir/get.jsonl" ) &
loads+=($!)
csv=$dir/rss.csv

echo "t_s,rss1_kib,rss2_kib,rss3_kib" > "$csv"
next_kill=$((SECONDS + KILL_EVERY)); kills=0
while [ $SECONDS -lt $end ]; do
  echo "$SECONDS,$(rss ${pid[1]}),$(rss ${pid[2]}),$(rss ${pid[3]})" >> "$csv"
  if [ $SECONDS -ge $next_kill ]; then
    l=$(leader); if [ -n "$l" ]; then
      kill -9 "${pid[$l]}"; wait "${pid[$l]}" 2>/dev/null || true
      sleep 2; start "$l"; kills=$((kills + 1))
      echo "$(date +%T) killed and restarted leader $l" >&2
    fi
    next_kill=$((SECONDS + KILL_EVERY))
  fi
  sleep 10
done
wait "${loads[@]}" 2>/dev/null || true
echo "leader kills: $kills"
echo "put runs: $(wc -l < "$dir/put.jsonl"), read runs: $(wc -l < "$dir/get.jsonl")"
grep -ho '"ok":[0-9]*' "$dir"/*.jsonl | awk -F: '{s+=$2} END {print "requests ok:", s+0}'
grep -ho '"errors":[0-9]*' "$dir"/*.jsonl | awk -F: '{s+=$2} END {print "requests counted as errors:", s+0}'
grep -ho '"error_counts":{[^}]*}' "$dir"/*.jsonl | sort | uniq -c | sort -rn | head -5
# After warm-up: the first sample past a quarter of the run.
awk -F, -v warm=$((DURATION / 4)) 'NR > 1 {
    for (i = 2; i <= 4; i++) { if ($i > peak[i]) peak[i] = $i; last[i] = $i; if ($1 >= warm && !(i in first)) first[i] = $i }
  } END { for (i = 2; i <= 4; i++) printf "node %d RSS MiB: after warm-up %d, end %d, peak %d\n", i - 1, first[i] / 1024, last[i] / 1024, peak[i] / 1024 }' "$csv"
echo "samples: $csv; logs: $dir"
