#!/usr/bin/env bash
# Instructions per node (per run for `order`) of one implementation of the harness, counted by
# callgrind: the binary runs the shape LOW and HIGH times under valgrind, and the difference
# of the two totals is divided by the extra runs (and nodes), so that building the graph and
# starting the runtime cancel out. Counts do not depend on the machine's load.
#
#   crates/baton-bench/scripts/instructions.sh BINARY SHAPE IMP SIZE [THREADS] [LOW] [HIGH] [--waits]
#   crates/baton-bench/scripts/instructions.sh target/release/baton-bench chain baton 1k
#
# Prints `SHAPE IMP SIZE THREADS: N instructions per node` (per run for `order`).
set -euo pipefail
bin=$1 shape=$2 imp=$3 size=$4 threads=${5:-1} low=${6:-20} high=${7:-40}
extra=()
[[ "${8:-}" == "--waits" ]] && extra=(--waits)
# shellcheck source=nodes.sh
source "$(dirname "$0")/nodes.sh"
count() {
  local out
  out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" --profile-run \
    "$shape" "$imp" "$size" "$threads" "$1" "${extra[@]}" 2>"$out" >/dev/null
  grep -o 'Collected : [0-9]*' "$out" | grep -o '[0-9]*$'
  rm -f "$out"
}
a=$(count "$low")
b=$(count "$high")
unit=$([[ "$shape" == order ]] && echo run || echo node)
echo "$shape $imp $size $threads: $(( (b - a) / ((high - low) * nodes) )) instructions per $unit"
