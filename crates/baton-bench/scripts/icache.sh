#!/usr/bin/env bash
# Instruction-cache figures per node (per run for `order`) of one implementation of the
# harness. cachegrind simulates a 32 KiB, 8-way L1 instruction cache of 64-byte lines (this
# machine's) while the binary runs the shape LOW and HIGH times; the difference of the
# misses is divided by the extra runs (and nodes), as instructions.sh does. callgrind then
# counts the hot code of HIGH runs: the instructions executed at least HIGH / 2 times and
# the cache lines they sit in (icache.py). Needs valgrind and python3.
#
#   crates/baton-bench/scripts/icache.sh BINARY SHAPE IMP SIZE [THREADS] [LOW] [HIGH] [--waits]
#   crates/baton-bench/scripts/icache.sh target/release/baton-bench order baton 5 1 20000 40000
#
# Prints `SHAPE IMP SIZE THREADS: M L1i misses per run (I instructions); hot code: ...`.
# With ICACHE_TOP=N in the environment, it also prints the N functions with the most hot
# lines.
set -euo pipefail
here=$(dirname "$0")
bin=$1 shape=$2 imp=$3 size=$4 threads=${5:-1} low=${6:-20} high=${7:-40}
extra=()
[[ "${8:-}" == "--waits" ]] && extra=(--waits)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
misses() {
  valgrind --tool=cachegrind --cache-sim=yes --I1=32768,8,64 --cachegrind-out-file=/dev/null \
    "$bin" --profile-run "$shape" "$imp" "$size" "$threads" "$1" "${extra[@]}" 2>"$dir/$1.txt" >/dev/null
  local refs miss
  refs=$(grep -o 'I *refs: *[0-9,]*' "$dir/$1.txt" | grep -o '[0-9,]*$' | tr -d ,)
  miss=$(grep -o 'I1 *misses: *[0-9,]*' "$dir/$1.txt" | grep -o '[0-9,]*$' | tr -d ,)
  echo "$refs $miss"
}
read -r ia ma <<<"$(misses "$low")"
read -r ib mb <<<"$(misses "$high")"
nodes=$(case "$shape" in order) echo 1 ;; *) echo "$size" | sed 's/k$/000/; s/M$/000000/' ;; esac)
unit=$([[ "$shape" == order ]] && echo run || echo node)
per() { python3 -c "print(round(($2 - $1) / (($high - $low) * $nodes), 1))"; }
valgrind --tool=callgrind --dump-instr=yes --dump-line=no --compress-pos=no --compress-strings=no \
  --callgrind-out-file="$dir/hot.out" "$bin" --profile-run "$shape" "$imp" "$size" "$threads" \
  "$high" "${extra[@]}" >/dev/null 2>&1
hot=$(python3 "$here/icache.py" "$dir/hot.out" "$high" "${ICACHE_TOP:-0}")
echo "$shape $imp $size $threads: $(per "$ma" "$mb") L1i misses per $unit ($(per "$ia" "$ib") instructions); hot code: $(echo "$hot" | head -1)"
if [[ -n "${ICACHE_TOP:-}" ]]; then
  echo "$hot" | tail -n +2
fi
