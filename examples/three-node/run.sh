#!/usr/bin/env bash
# Runs a three-node cluster from examples/three-node/node{1,2,3}.toml as three
# `wasmraft run` processes; Ctrl-C stops them all. State goes to
# wasmraft-data/three-node/ (delete it to start afresh).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${WASMRAFT_BIN:-${CARGO_TARGET_DIR:-target}/debug/wasmraft}
[ -x "$bin" ] || cargo build --locked --release --bin wasmraft
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' INT TERM EXIT
for i in 1 2 3; do
  mkdir -p wasmraft-data
  "$bin" run --config "examples/three-node/node$i.toml" 2> "wasmraft-data/node$i.log" &
  pids+=($!)
done
echo "three nodes running on 127.0.0.1:7379,7380,7381 (logs in wasmraft-data/node*.log)"
echo "try: $bin put a 1 && $bin get a && $bin status --endpoints 127.0.0.1:7380"
wait
