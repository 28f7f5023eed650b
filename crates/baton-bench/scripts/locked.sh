#!/usr/bin/env bash
# Locked instructions (atomic read-modify-writes) per node (per run for `order`) of one
# implementation of the harness, counted as instructions.sh counts instructions: callgrind
# runs the shape LOW and HIGH times, and the difference is divided by the extra runs (and
# nodes). Needs valgrind, objdump and addr2line (binutils) and python3.
#
#   crates/baton-bench/scripts/locked.sh BINARY SHAPE IMP SIZE [THREADS] [LOW] [HIGH] [--waits]
#   crates/baton-bench/scripts/locked.sh target/release/baton-bench order baton 1 1 1000 2000
#
# Prints `SHAPE IMP SIZE THREADS: N locked instructions per node` (per run for `order`).
# With LOCKED_SITES=N in the environment, it also prints the N sites that HIGH runs
# executed most.
set -euo pipefail
here=$(dirname "$0")
bin=$1 shape=$2 imp=$3 size=$4 threads=${5:-1} low=${6:-20} high=${7:-40}
extra=()
[[ "${8:-}" == "--waits" ]] && extra=(--waits)
# shellcheck source=nodes.sh
source "$here/nodes.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
count() {
  valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$dir/$1.out" "$bin" \
    --profile-run "$shape" "$imp" "$size" "$threads" "$1" "${extra[@]}" >/dev/null 2>&1
  python3 "$here/locked.py" "$bin" "$dir/$1.out" | head -1
}
a=$(count "$low")
b=$(count "$high")
unit=$([[ "$shape" == order ]] && echo run || echo node)
echo "$shape $imp $size $threads: $(python3 -c "print(round(($b - $a) / (($high - $low) * $nodes), 1))") locked instructions per $unit"
if [[ -n "${LOCKED_SITES:-}" ]]; then
  python3 "$here/locked.py" "$bin" "$dir/$high.out" --sites "$LOCKED_SITES" | tail -n +2
fi
