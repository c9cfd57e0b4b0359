#!/usr/bin/env bash
# Chapter 09's benchmark: 4 KiB RDMA WRITE and READ latency through the pool API
# (`ch09-memory-pool --bench`) against perftest's ib_write_lat / ib_read_lat, on the same two
# VMs of one pair lab, in one run. Under TCG absolute numbers mean little: compare ratios.
#
# usage: chapters/09-memory-pool/bench/pool-vs-perftest.sh [ITERS] [ROUNDS]
#   ITERS   iterations per measurement (default 1000)
#   ROUNDS  how many times to repeat the four measurements, interleaved (default 2)
# Needs: a built chapter (cargo build -p ch09-memory-pool), perftest in the lab (ib_write_lat).
set -euo pipefail
iters=${1:-1000}
rounds=${2:-2}
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
lab=(cargo lab)
if [[ -x target/debug/cargo-lab ]]; then lab=(target/debug/cargo-lab); fi
"${lab[@]}" up -t pair >/dev/null
# Run a copy under a fresh name: a binary rebuilt while a lab is up can be seen stale by the
# guest (see the chapter README).
mkdir -p target/bench
bin="$root/target/bench/ch09-memory-pool-$$"
cp target/debug/ch09-memory-pool "$bin"
out=$(mktemp -d)
on() { local node=$1; shift; timeout 300 "${lab[@]}" exec -t pair -n "$node" -- "$@"; }
pair() { # pair NAME SERVER-ARGV... -- CLIENT-ARGV...
  local name=$1; shift
  local srv=() cli=()
  while [[ $1 != -- ]]; do srv+=("$1"); shift; done; shift
  cli=("$@")
  on a "${srv[@]}" >"$out/$name.server" 2>&1 &
  local spid=$!
  sleep 3
  on b "${cli[@]}" >"$out/$name.client" 2>&1 || echo "client of $name failed: see $out/$name.client" >&2
  wait "$spid" || echo "server of $name failed: see $out/$name.server" >&2
}
for r in $(seq 1 "$rounds"); do
  pair "write_lat.$r" ib_write_lat -s 4096 -n "$iters" -x 1 -- ib_write_lat -s 4096 -n "$iters" -x 1 10.77.0.1
  pair "read_lat.$r" ib_read_lat -s 4096 -n "$iters" -x 1 -- ib_read_lat -s 4096 -n "$iters" -x 1 10.77.0.1
  pair "pool.$r" "$bin" --server --bench "$iters" -- "$bin" --connect 10.77.0.1 --bench "$iters"
done
rm -f "$bin"
echo "raw output: $out"
for r in $(seq 1 "$rounds"); do
  echo "== round $r"
  for t in write_lat read_lat; do
    # perftest's result line: #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
    awk -v t="$t" '$1 == 4096 && NF >= 9 { printf "  %-10s median %8.2f us  p99 %8.2f us  (t_min %.2f, t_avg %.2f)\n", "ib_" t, $5, $8, $3, $6 }' "$out/$t.$r.client"
  done
  sed -n 's/^  \(WRITE\|READ\) */  pool \1 /p' "$out/pool.$r.client"
done
