#!/usr/bin/env python3
"""Counts the library's rustdoc examples, read from its sources.

Usage: python3 crates/baton/scripts/doc_examples.py [SRC]   (default: crates/baton/src)

Prints two figures:
- public items with an asserting example: items declared `pub` (functions and methods,
  structs, enums, traits, type aliases, constants, statics, modules; not fields, not
  `pub(crate)`, not `#[doc(hidden)]`) whose `///` doc holds a Rust code block that calls `assert`;
- fenced examples: code blocks opened in `///` or `//!` comments, of any language.

Test files (`tests/` folders, `*_tests.rs`) and `#[cfg(test)]` modules are left out.
"""
import os
import re
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else "crates/baton/src"

ITEM = re.compile(
    r"\s*pub\s+(?:const\s+|async\s+|unsafe\s+)*(fn|struct|enum|trait|type|const|static|mod)\s+([A-Za-z_][A-Za-z0-9_]*)"
)
FENCE = re.compile(r"\s*//[/!]\s?\s*```(.*)")
NOT_RUST = {"text", "json", "sh", "console", "toml", "yaml", "ignore", "mermaid", "dot"}


def is_test_file(rel):
    return re.search(r"(^|/)tests?(/|\.rs$)", rel) or rel.endswith("_tests.rs")


def without_test_modules(lines):
    """The lines outside `#[cfg(test)] mod name { .. }` blocks."""
    out, depth, skip_at, pending = [], 0, None, False
    for line in lines:
        s = line.strip()
        if skip_at is not None:
            depth += line.count("{") - line.count("}")
            if depth <= skip_at:
                skip_at = None
            continue
        if s.startswith("#[cfg(test)]"):
            pending = True
            continue
        if pending and re.match(r"(pub(\(\w+\))?\s+)?mod\s", s) and not s.endswith(";"):
            skip_at = depth
            depth += line.count("{") - line.count("}")
            pending = False
            continue
        pending = pending and (not s or s.startswith("#["))
        depth += line.count("{") - line.count("}")
        out.append(line)
    return out


def asserting(doc):
    """Whether the doc lines hold a Rust code block that asserts."""
    block, rust = None, False
    for line in doc:
        m = FENCE.match(line)
        if m:
            if block is None:
                lang = {w.strip() for w in m.group(1).split(",") if w.strip()}
                rust = not (lang & NOT_RUST)
                block = []
            else:
                if rust and any("assert" in l for l in block):
                    return True
                block = None
            continue
        if block is not None:
            block.append(line)
    return False


def main():
    items = with_example = fenced = 0
    for root, _, names in os.walk(SRC):
        for name in sorted(names):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            if is_test_file(os.path.relpath(path, SRC)):
                continue
            lines = without_test_modules(open(path, encoding="utf-8").read().split("\n"))
            fenced += sum(1 for l in lines if FENCE.match(l)) // 2
            doc, hidden = [], False
            for line in lines:
                s = line.strip()
                if s.startswith("///"):
                    doc.append(line)
                    continue
                if s.startswith("#[") or s.startswith("#!["):
                    hidden = hidden or "doc(hidden)" in s
                    continue  # attributes between the doc and the item
                if ITEM.match(line) and not hidden:
                    items += 1
                    with_example += asserting(doc)
                doc, hidden = [], False
    print(f"public items with an asserting example: {with_example} of {items}")
    print(f"fenced examples in rustdoc: {fenced}")


if __name__ == "__main__":
    main()
