#!/usr/bin/env python3
"""Instruction-cache figures from two callgrind profiles of the same binary, written with
`--cache-sim=yes --dump-instr=yes --dump-line=no --compress-pos=no --compress-strings=no`,
the second of EXTRA more runs than the first.

    icache.py LOW_PROFILE HIGH_PROFILE EXTRA NODES UNIT [TOP]

Prints `M L1i misses per UNIT (I instructions); hot code: H instructions in L lines (K KiB)`:
misses and instructions are the differences of the two profiles over EXTRA * NODES. The hot
code is the instructions that the extra runs executed at least EXTRA / 2 times, and the
64-byte cache lines they sit in. Then the TOP functions with the most hot lines, each with
its hot lines and instructions.
"""
import collections
import sys


def read(profile):
    """Per (object, address): instructions executed, and its function. Totals of Ir and
    I1mr over the program."""
    executed = collections.Counter()
    owner = {}
    totals = [0, 0]
    events = []
    obj, fn, after_call = None, None, False
    with open(profile) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("ob="):
                obj = line[3:].strip()
            elif line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("calls="):
                # The next cost line is the call's inclusive cost, not the call site's own.
                after_call = True
            elif line.startswith("0x"):
                if after_call:
                    after_call = False
                    continue
                fields = line.split()
                costs = [int(v) for v in fields[1:]] + [0] * len(events)
                ir = costs[events.index("Ir")]
                misses = costs[events.index("I1mr")]
                key = (obj, int(fields[0], 16))
                executed[key] += ir
                owner[key] = fn
                totals[0] += ir
                totals[1] += misses
    if "I1mr" not in events:
        sys.exit(f"icache.py: {profile} has no I1mr events: was it written with --cache-sim=yes?")
    return executed, owner, totals


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    low, high = read(sys.argv[1]), read(sys.argv[2])
    extra, nodes, unit = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    top = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    per = extra * nodes
    instructions = (high[2][0] - low[2][0]) / per
    misses = (high[2][1] - low[2][1]) / per
    hot = [k for k, n in high[0].items() if n - low[0].get(k, 0) >= extra // 2]
    lines = {(obj, address >> 6) for obj, address in hot}
    print(
        f"{misses:.1f} L1i misses per {unit} ({instructions:.1f} instructions); hot code: "
        f"{len(hot)} instructions in {len(lines)} lines ({len(lines) * 64 / 1024:.1f} KiB)"
    )
    by_fn = collections.defaultdict(lambda: (set(), [0]))
    for key in hot:
        its_lines, its_count = by_fn[high[1][key]]
        its_lines.add((key[0], key[1] >> 6))
        its_count[0] += 1
    ranked = sorted(by_fn.items(), key=lambda kv: -len(kv[1][0]))
    for name, (its_lines, its_count) in ranked[:top]:
        print(f"{len(its_lines):5} {its_count[0]:6} {name[:130]}")


if __name__ == "__main__":
    main()
