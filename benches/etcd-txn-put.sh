#!/usr/bin/env bash
# The txn-put workload of etcd's benchmark tool (each request one Txn of one
# Put, no compares), with the columns of ../shared/tools/etcd-bench.sh so
# that benches/report.py reads its row like the others:
#
#   ENDPOINTS=127.0.0.1:2379,... SERVER_PIDS="1 2 3" benches/etcd-txn-put.sh
#
# Environment: TOTAL=50000 CONNS=200 CLIENTS=1000 KEY_SIZE=8 VAL_SIZE=256,
# OUT_DIR (raw output; default a mktemp dir), ETCD_BIN_DIR (where etcd's
# `benchmark` lives; ../shared/tools/etcd-cluster.sh installs it there).
set -euo pipefail
ENDPOINTS=${ENDPOINTS:?comma-separated client endpoints}
SERVER_PIDS=${SERVER_PIDS:?the servers\' pids, for their CPU}
TOTAL=${TOTAL:-50000}
CONNS=${CONNS:-200}
CLIENTS=${CLIENTS:-1000}
KEY_SIZE=${KEY_SIZE:-8}
VAL_SIZE=${VAL_SIZE:-256}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/etcd-txn-put.XXXXXX)}
ETCD_BIN_DIR=${ETCD_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/peers/etcd/bin}
mkdir -p "$OUT_DIR"
CLK=$(getconf CLK_TCK)

server_cpu() { # seconds of user+system CPU of SERVER_PIDS
  local t=0 p rest
  for p in $SERVER_PIDS; do
    rest=$(sed 's/^.*) //' "/proc/$p/stat"); set -- $rest
    t=$((t + ${12} + ${13}))
  done
  awk -v t="$t" -v h="$CLK" 'BEGIN{printf "%.2f", t/h}'
}
machine_busy() { # busy CPU-seconds of the whole machine
  awk -v h="$CLK" '/^cpu /{printf "%.2f", ($2+$3+$4+$7+$8+$9)/h; exit}' /proc/stat
}

raw=$OUT_DIR/f:txn-put.out
load1=$(cut -d' ' -f1 /proc/loadavg)
c0=$(server_cpu); m0=$(machine_busy); t0=$(date +%s.%N)
# `times` in the subshell reports the CPU of its only child: the client.
cli=$( ( "$ETCD_BIN_DIR/benchmark" --endpoints "$ENDPOINTS" --precise --conns "$CONNS" --clients "$CLIENTS" \
          txn-put --total "$TOTAL" --key-size "$KEY_SIZE" --val-size "$VAL_SIZE" --key-space-size "$TOTAL" \
          --txn-ops 1 >"$raw" 2>"$OUT_DIR/f:txn-put.stderr"; times ) | awk 'NR==2{
        split($1,u,"m"); split($2,s,"m"); sub("s","",u[2]); sub("s","",s[2]);
        printf "%.2f", u[1]*60+u[2]+s[1]*60+s[2]}')
t1=$(date +%s.%N); c1=$(server_cpu); m1=$(machine_busy)
read -r rps avg p50 p99 errs <<<"$(tr '\r' '\n' <"$raw" | awk '
  /^ *Requests\/sec:/ {rps=$2}
  /^ *Average:/       {avg=$2*1000}
  /^ *50% in/         {p50=$3*1000}
  /^ *99% in/         {p99=$3*1000}
  /^Error distribution:/ {inerr=1; next}
  inerr && /^ *\[[0-9]+\]/ {gsub(/[\[\]]/,"",$1); errs+=$1}
  END {printf "%.1f %.3f %.3f %.3f %d", rps, avg, p50, p99, errs}')"
cpu=$(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.2f", b-a}')
opc=$(awk -v c="$cpu" -v n="$TOTAL" -v e="$errs" 'BEGIN{ if (c>0) printf "%.0f", (n-e)/c; else print "NA"}')
oth=$(awk -v a="$m0" -v b="$m1" -v c="$cpu" -v k="$cli" 'BEGIN{printf "%.2f", (b-a)-c-k}')
printf '%-22s %5s %7s %7s %6s %10s %8s %8s %8s %9s %10s %9s %7.1f %9s %5s\n' \
  "f:txn-put" "$CONNS" "$CLIENTS" "$TOTAL" "$errs" "$rps" "$avg" "$p50" "$p99" "$cpu" "$opc" "$cli" \
  "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" "$oth" "$load1"
