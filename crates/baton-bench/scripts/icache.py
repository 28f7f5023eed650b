#!/usr/bin/env python3
"""Hot code of a callgrind profile written with `--dump-instr=yes --dump-line=no
--compress-pos=no --compress-strings=no`: the instructions executed at least RUNS / 2 times, and the 64-byte
cache lines they sit in, in all and by function.

    icache.py PROFILE RUNS [TOP]

Prints `H hot instructions in L lines (K KiB)`, then the TOP functions with the most hot
lines.
"""
import collections
import sys


def main():
    profile, runs = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    counts = collections.Counter()
    owner = {}
    fn, after_call = None, False
    with open(profile) as f:
        for line in f:
            if line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("calls="):
                # The next cost line is the call's inclusive cost, not the call site's own.
                after_call = True
            elif line.startswith("0x"):
                if after_call:
                    after_call = False
                    continue
                fields = line.split()
                address = int(fields[0], 16)
                counts[address] += int(fields[1]) if len(fields) > 1 else 0
                owner[address] = fn
    hot = [a for a, n in counts.items() if n >= runs // 2]
    lines = {a >> 6 for a in hot}
    print(f"{len(hot)} hot instructions in {len(lines)} lines ({len(lines) * 64 / 1024:.1f} KiB)")
    by_fn = collections.defaultdict(set)
    for a in hot:
        by_fn[owner[a]].add(a >> 6)
    for name, its in sorted(by_fn.items(), key=lambda kv: -len(kv[1]))[:top]:
        print(f"{len(its):5} {name[:140]}")


if __name__ == "__main__":
    main()
