# Sourced by instructions.sh, locked.sh and icache.sh, with `bin`, `shape`, `imp`, `size`,
# `threads` and the `extra` array set: a run of no runs checks the arguments, stopping
# the script with the binary's message if they are wrong, and sets `nodes` to what the
# counts are divided by: the graph's node count (from the binary's ` n=` figure), or 1 for
# `order`, whose counts are per run.
if ! built=$("$bin" --profile-run "$shape" "$imp" "$size" "$threads" 0 "${extra[@]}" \
  2>&1 >/dev/null); then
  echo "$(basename "$0"): $built" >&2
  exit 1
fi
nodes=1
if [[ "$shape" != order ]]; then
  nodes=$(grep -o ' n=[0-9]*' <<<"$built" | head -1 | cut -d= -f2)
fi
