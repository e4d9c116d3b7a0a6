#!/usr/bin/env bash
# A/B: two `wasmraft` binaries, alternated, each time a fresh 3-node cluster
# on loopback driven by etcd's own benchmark tool through etcd's API (the
# same tool and parameters as benches/compare.sh). One table row per run.
# Alternating puts both binaries under the same machine drift, which on
# these shared machines moves absolute figures by 10-20% within minutes.
#
#   benches/ab.sh OLD_BIN NEW_BIN             # 3 rounds of workload b (put 200/1000)
#
# It ends with one line per workload: each binary's medians and the median
# and range of the pairs' own new/old ratios.
#   ROUNDS=2 WORKLOADS="a c" benches/ab.sh OLD_BIN NEW_BIN
#
# Needs etcd's tools via ../shared/tools (or ETCD_TOOLS). Both fsync before
# acknowledging. A binary of an older commit: `git worktree` or build it,
# copy target/release/wasmraft aside, and come back.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: benches/ab.sh OLD_BIN NEW_BIN" >&2; exit 2; }
TOOLS=${ETCD_TOOLS:-../shared/tools}
ROUNDS=${ROUNDS:-3}
WORKLOADS=${WORKLOADS:-b}

one() { # bin label
  local bin=$1 label=$2 out pids=() ep=127.0.0.1:7379,127.0.0.1:7380,127.0.0.1:7381
  out=$(mktemp -d /tmp/wasmraft-ab.XXXXXX)
  for i in 1 2 3; do
    printf 'id = %s\ndata_dir = "%s/node-%s"\nlisten = "127.0.0.1:%s"\n[peers]\n1 = "127.0.0.1:7479"\n2 = "127.0.0.1:7480"\n3 = "127.0.0.1:7481"\n' \
      "$i" "$out" "$i" "$((7378 + i))" > "$out/node$i.toml"
    "$bin" --log-level warn run --config "$out/node$i.toml" 2> "$out/node$i.log" &
    pids+=($!)
  done
  for _ in $(seq 100); do "$bin" status --endpoints $ep 2>/dev/null | grep -q 'leader:   [0-9]' && break; sleep 0.1; done
  ETCD_PIDS="${pids[*]}" WORKLOADS="$WORKLOADS" TOTAL=${TOTAL:-50000} A_TOTAL=${A_TOTAL:-3000} CONNS=${CONNS:-200} \
    CLIENTS=${CLIENTS:-1000} OUT_DIR="$out/raw" "$TOOLS/etcd-bench.sh" "$ep" 2> "$out/bench.err" \
    | grep -E '^[a-z][0-9]?:' | sed "s/^/$label /" || { cat "$out/bench.err" >&2; }
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$out"
}

echo "# machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "# binary workload conns clients total errors req/s avg_ms p50_ms p99_ms srv_cpu_s ops/cpu_s cli_cpu_s wall_s oth_cpu_s load1"
rows=$(mktemp)
for _ in $(seq "$ROUNDS"); do
  one "$1" old | tee -a "$rows"
  one "$2" new | tee -a "$rows"
done
# Per workload: the medians of each binary, and the median and range of the
# pairs' own new/old ratios (each pair ran back to back).
awk '
  { k = $2; n = ++count[$1, k]; req[$1, k, n] = $7; p99[$1, k, n] = $10; opc[$1, k, n] = $12; seen[k] = 1 }
  function med(a, b, k, m,   i, j, t, v) {
    for (i = 1; i <= m; i++) v[i] = a[b, k, i]
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
  }
  function ratios(a, k, m,   i, j, t, r, lo, hi) {
    for (i = 1; i <= m; i++) r[i] = a["old", k, i] > 0 ? a["new", k, i] / a["old", k, i] : 0
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
    return sprintf("%.2fx (%.2f-%.2f)", m % 2 ? r[(m + 1) / 2] : (r[m / 2] + r[m / 2 + 1]) / 2, r[1], r[m])
  }
  END {
    for (k in seen) {
      m = count["old", k] < count["new", k] ? count["old", k] : count["new", k]
      if (m == 0) continue
      printf "# %s, medians of %d pairs: req/s %.0f -> %.0f, new/old %s; ops per server CPU-s %.0f -> %.0f, new/old %s; p99 ms %.1f -> %.1f\n",
        k, m, med(req, "old", k, m), med(req, "new", k, m), ratios(req, k, m),
        med(opc, "old", k, m), med(opc, "new", k, m), ratios(opc, k, m), med(p99, "old", k, m), med(p99, "new", k, m)
    }
  }' "$rows"
rm -f "$rows"
