#!/usr/bin/env python3
"""Locked instructions (atomic read-modify-writes: `lock`-prefixed ones and `xchg` with
memory) that a binary executed, from a callgrind profile taken with `--dump-instr=yes`.

    locked.py BINARY PROFILE [--sites N]

Prints the total; with `--sites N`, also the N sites executed most, each with the source
lines `addr2line` gives for it. Instruction counts do not show what these cost: each
takes some 20 cycles or more where a plain add takes one, so two programs with the same
instruction count can differ in time by what they lock.
"""
import re
import subprocess
import sys


def locked_addresses(binary):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary],
                         capture_output=True, text=True, check=True).stdout
    addrs = set()
    for line in out.splitlines():
        m = re.match(r"\s+([0-9a-f]+):\s+(lock|xchg)\b", line)
        if m:
            addrs.add(int(m.group(1), 16))
    return addrs


def executions(profile, binary):
    """Executions per instruction address of `binary`'s own object in `profile`."""
    names, counts = {}, {}
    obj, pos, after_call = None, 0, False
    for line in open(profile):
        m = re.match(r"c?ob=\((\d+)\)(?: (.*))?", line)
        if m:
            if m.group(2):
                names[m.group(1)] = m.group(2).strip()
            if line.startswith("ob="):
                obj = names.get(m.group(1))
            continue
        if line.startswith("calls="):
            after_call = True
            continue
        if not line or line[0] not in "0123456789+-*":
            continue
        fields = line.split()
        p = fields[0]
        if p.startswith("0x"):
            pos = int(p, 16)
        elif p[0] in "+-":
            step = int(p[1:], 0)
            pos = pos + step if p[0] == "+" else pos - step
        elif p != "*":
            pos = int(p)
        if after_call:
            # The line after `calls=` is the call's inclusive cost, not an execution here.
            after_call = False
            continue
        if obj and obj.endswith(binary.split("/")[-1]) and len(fields) >= 3:
            counts[pos] = counts.get(pos, 0) + int(fields[2])
    return counts


def main():
    binary, profile = sys.argv[1], sys.argv[2]
    sites = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--sites" else 0
    locked = locked_addresses(binary)
    counts = {a: n for a, n in executions(profile, binary).items() if a in locked}
    print(sum(counts.values()))
    for addr, n in sorted(counts.items(), key=lambda kv: -kv[1])[:sites]:
        where = subprocess.run(["addr2line", "-f", "-C", "-i", "-e", binary, hex(addr)],
                               capture_output=True, text=True).stdout.splitlines()
        frames = [f"{where[i]} ({where[i + 1].rsplit('/', 1)[-1]})"
                  for i in range(0, len(where) - 1, 2)]
        # The innermost frames are the standard library's atomics: show the callers.
        own = [f for f in frames if not re.match(r"<?(core|alloc|std)::", f)] or frames
        print(f"{n:>10} {hex(addr)} " + " <- ".join(own[:2]))


main()
