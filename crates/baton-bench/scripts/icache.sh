#!/usr/bin/env bash
# Instruction-cache figures per node (per run for `order`) of one implementation of the
# harness. callgrind runs the shape LOW and HIGH times, simulating an L1 instruction cache
# of 32 KiB, 8 ways and 64-byte lines (the benchmark machine's); the difference of the two
# profiles is divided by the extra runs (and nodes), as instructions.sh does, so that
# starting the process and building the graph cancel out. From the same difference,
# icache.py counts the hot code: the instructions executed at least once every other
# extra run, and the cache lines they sit in. Needs valgrind and python3.
#
#   crates/baton-bench/scripts/icache.sh BINARY SHAPE IMP SIZE [THREADS] [LOW] [HIGH] [--waits]
#   crates/baton-bench/scripts/icache.sh target/release/baton-bench order baton 5 1 20000 40000
#
# LOW and HIGH default to 2 000 and 4 000. Prints `SHAPE IMP SIZE THREADS: M L1i misses
# per run (I instructions); hot code: H instructions in L lines (K KiB)`. With ICACHE_TOP=N
# in the environment, it also prints the N functions with the most hot lines, with their
# hot lines and instructions. The misses are a simulation: check a lead on the clock.
set -euo pipefail
here=$(dirname "$0")
args=() extra=()
for arg in "$@"; do
  if [[ "$arg" == "--waits" ]]; then extra=(--waits); else args+=("$arg"); fi
done
if [[ ${#args[@]} -lt 4 ]]; then
  echo "usage: icache.sh BINARY SHAPE IMP SIZE [THREADS] [LOW] [HIGH] [--waits]" >&2
  exit 2
fi
bin=${args[0]} shape=${args[1]} imp=${args[2]} size=${args[3]}
threads=${args[4]:-1} low=${args[5]:-2000} high=${args[6]:-4000}
if ! [[ "$low" =~ ^[0-9]+$ && "$high" =~ ^[0-9]+$ ]] || ((low >= high)); then
  echo "icache.sh: LOW and HIGH must be run counts, LOW below HIGH (got $low and $high)" >&2
  exit 2
fi
# shellcheck source=nodes.sh
source "$here/nodes.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
profile() {
  if ! valgrind --tool=callgrind --cache-sim=yes --I1=32768,8,64 --dump-instr=yes \
    --dump-line=no --compress-pos=no --compress-strings=no --callgrind-out-file="$dir/$1.out" \
    "$bin" --profile-run "$shape" "$imp" "$size" "$threads" "$1" "${extra[@]}" \
    >/dev/null 2>"$dir/$1.err"; then
    echo "icache.sh: the profile of $1 runs failed:" >&2
    cat "$dir/$1.err" >&2
    exit 1
  fi
}
profile "$low"
profile "$high"
unit=$([[ "$shape" == order ]] && echo run || echo node)
figures=$(python3 "$here/icache.py" "$dir/$low.out" "$dir/$high.out" "$((high - low))" \
  "$nodes" "$unit" "${ICACHE_TOP:-0}")
echo "$shape $imp $size $threads: $figures"
