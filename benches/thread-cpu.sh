#!/usr/bin/env bash
# Where each request's CPU and time go: a fresh 3-node cluster of the
# `wasmraft` binary on loopback, driven through etcd's API by etcd's own
# benchmark tool on the leader, then per request
#   - the CPU of each member's threads by kind (tokio workers, Raft, log
#     writer, apply), from /proc before and after;
#   - the context switches of each member;
#   - the means of the leader's own histograms (request, commit, apply,
#     log fsync, heartbeat round trip), from its /metrics.
#
#   benches/thread-cpu.sh                       # put 1/1, 3000 puts
#   CONNS=200 CLIENTS=1000 TOTAL=50000 benches/thread-cpu.sh
#   TARGET=follower benches/thread-cpu.sh       # through a follower (forwarded)
#
# Needs etcd's benchmark tool (WASMRAFT_ETCD_BENCHMARK, or `benchmark` on the
# PATH) and a release build (`cargo build --release -p wasmraft-cli`). fsync
# before acknowledging, as always. /proc counts CPU in clock ticks (10 ms):
# run at least a few thousand requests.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/wasmraft}
TOOL=${WASMRAFT_ETCD_BENCHMARK:-benchmark}
CONNS=${CONNS:-1} CLIENTS=${CLIENTS:-1} TOTAL=${TOTAL:-3000} TARGET=${TARGET:-leader}
case $TARGET in leader | follower) ;; *) echo "thread-cpu: TARGET is leader or follower" >&2; exit 2 ;; esac
ep=127.0.0.1:7379,127.0.0.1:7380,127.0.0.1:7381
if "$BIN" status --endpoints $ep >/dev/null 2>&1; then
  echo "thread-cpu: another cluster answers on ports 7379-7381" >&2
  exit 1
fi
out=$(mktemp -d /tmp/wasmraft-thread-cpu.XXXXXX)
pids=()
cleanup() {
  local rc=$?
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ "$rc" -ne 0 ]; then
    echo "thread-cpu: failed; the nodes' logs and the tool's output are in $out" >&2
  else
    rm -rf "$out"
  fi
}
trap cleanup EXIT
for i in 1 2 3; do
  printf 'id = %s\ndata_dir = "%s/node-%s"\nlisten = "127.0.0.1:%s"\nmetrics_listen = "127.0.0.1:%s"\n[peers]\n1 = "127.0.0.1:7479"\n2 = "127.0.0.1:7480"\n3 = "127.0.0.1:7481"\n' \
    "$i" "$out" "$i" "$((7378 + i))" "$((9100 + i))" > "$out/node$i.toml"
  "$BIN" --log-level warn run --config "$out/node$i.toml" 2> "$out/node$i.log" &
  pids+=($!)
done
for _ in $(seq 100); do "$BIN" status --endpoints $ep 2>/dev/null | grep -q 'leader:   [0-9]' && break; sleep 0.1; done
leader=$("$BIN" status --endpoints $ep | awk '/leader:/ {print $2}')
for _ in $(seq 50); do curl -sf "127.0.0.1:$((9100 + leader))/metrics" >/dev/null && break; sleep 0.1; done

# One line per member (its process: threads that ended count too) and per
# thread: member, kind, thread id, CPU ticks, context switches.
snapshot() {
  local i=0
  for p in "${pids[@]}"; do
    i=$((i + 1))
    local pstat
    pstat=$(cat "/proc/$p/stat")
    echo "$i process 0 $(echo "${pstat##*)}" | awk '{print $12 + $13}') 0"
    for t in /proc/"$p"/task/*; do
      local name kind stat
      name=$(cat "$t/comm" 2>/dev/null) && stat=$(cat "$t/stat" 2>/dev/null) || continue
      case $name in tokio-rt-worker) kind=tokio ;; raft-*) kind=raft ;; log-writer*) kind=log-writer ;;
        apply*) kind=apply ;; *) kind=other ;; esac
      # utime and stime: fields 14 and 15, counted after the ")" ending the name
      echo "$i $kind ${t##*/} $(echo "${stat##*)}" | awk '{print $12 + $13}') \
$(awk '/^(voluntary|nonvoluntary)_ctxt/ {s += $2} END {print s}' "$t/status" 2>/dev/null)"
    done
  done
}
metrics() { curl -s "127.0.0.1:$((9100 + leader))/metrics"; }

target=$leader
[ "$TARGET" = leader ] || target=$(( leader % 3 + 1 ))
metrics > "$out/m0"; snapshot > "$out/s0"
"$TOOL" --endpoints "127.0.0.1:$((7378 + target))" --conns "$CONNS" --clients "$CLIENTS" \
  put --total "$TOTAL" --key-size 8 --val-size 256 --key-space-size "$TOTAL" > "$out/tool.txt" 2>&1
grep -E 'Requests/sec|Average|50%|99%' "$out/tool.txt" | sed 's/^ */  /'
metrics > "$out/m1"; snapshot > "$out/s1"

echo "# CPU per request, us (leader: member $leader, requests to member $target), and context switches per request"
awk -v n="$TOTAL" -v hz="$(getconf CLK_TCK)" -v leader="$leader" '
  FNR == NR { cpu0[$1, $3] = $4; cs0[$1, $3] = $5; next }
  $2 == "process" { total[$1] = $4 - cpu0[$1, 0]; next }
  # A thread born during the run counts from zero; one that ended is in the
  # process total only. "rest": those, and each thread'"'"'s rounding to ticks.
  { cpu[$1, $2] += $4 - cpu0[$1, $3]; live[$1] += $4 - cpu0[$1, $3]; cs[$1] += $5 - cs0[$1, $3]; kinds[$2] = 1 }
  END {
    us = 1e6 / hz / n
    for (m = 1; m <= 3; m++) {
      line = sprintf("member %d%s:", m, m == leader ? " (leader)" : "")
      for (k in kinds) line = line sprintf(" %s %.0f", k, cpu[m, k] * us)
      printf "%s rest %.0f; total %.0f; switches %.1f\n", line, (total[m] - live[m]) * us, total[m] * us, cs[m] / n
      all += total[m] * us
    }
    printf "all members: %.0f us of CPU per request\n", all
  }' "$out/s0" "$out/s1"

echo "# the leader's histograms, mean per observation"
awk '
  /^#/ { next }
  { split($1, a, "{"); name = a[1]; labels = (2 in a) ? "{" a[2] : "" }
  name ~ /_(sum|count)$/ { kind = name; sub(/.*_/, "", kind); sub(/_(sum|count)$/, "", name); key = name labels
    if (FNR == NR) before[key, kind] = $2; else after[key, kind] = $2; keys[key] = 1 }
  END {
    for (k in keys) {
      if (k !~ /duration_seconds|round_trip_seconds|handling_seconds/) continue
      n = after[k, "count"] - before[k, "count"]
      if (n > 0) printf "  %-80s n=%-7d mean %.0f us\n", k, n, (after[k, "sum"] - before[k, "sum"]) / n * 1e6
    }
  }' "$out/m0" "$out/m1" | sort
