#!/usr/bin/env python3
"""Fails if pagoda-core's code in the firmware can recurse.

Reads the firmware's disassembly (`arm-none-eabi-objdump -d -C`), builds the
call graph of direct calls (`bl`, and branches into another function: tail
calls) with functions named by address, so each monomorphised copy is its own
node, and finds its strongly connected components. A component of more than
one function, or a function that calls itself, is a cycle, and any cycle is
refused: most of core is inlined into the firmware's own functions, so a
cycle through core's code may carry another function's name. An indirect
call (`blx rN`) inside a function named as core's is refused too, since the
graph cannot see where it goes; those outside core (`core::fmt` formats
through `dyn Write`) are counted, not refused.

Usage: check-no-recursion.py DISASSEMBLY   (or --self-test)
"""

import re
import sys

FUNC = re.compile(r"^([0-9a-f]+) <(.+)>:$")
INSN = re.compile(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$")
TARGET = re.compile(r"^([0-9a-f]+) <")
# Thumb-2 direct calls and branches (with condition and width suffixes).
CALL = re.compile(r"^blx?$")
BRANCH = re.compile(r"^b(eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al)?(\.[nw])?$")
INDIRECT = re.compile(r"^blx$")


def is_core(name):
    """Whether a demangled name is one of pagoda-core's functions (an inherent
    function, a trait impl on a core type, or a generic instantiated here)."""
    return name.startswith("pagoda_core::") or name.startswith("<pagoda_core::")


def parse(lines):
    """Functions (start address -> name), direct edges and indirect call
    sites, from objdump's text."""
    starts, names = [], {}
    body = []  # (function start, address, mnemonic, operands)
    current = None
    for line in lines:
        m = FUNC.match(line)
        if m:
            current = int(m.group(1), 16)
            starts.append(current)
            names[current] = m.group(2)
            continue
        m = INSN.match(line)
        if m and current is not None:
            body.append((current, int(m.group(1), 16), m.group(2), m.group(3)))
    starts.sort()
    return starts, names, body


def owner(starts, addr):
    """The function whose code holds `addr` (binary search over starts)."""
    lo, hi = 0, len(starts) - 1
    found = None
    while lo <= hi:
        mid = (lo + hi) // 2
        if starts[mid] <= addr:
            found = starts[mid]
            lo = mid + 1
        else:
            hi = mid - 1
    return found


def graph(starts, body):
    edges = {s: set() for s in starts}
    indirect = {}
    for func, _addr, mnem, ops in body:
        if INDIRECT.match(mnem) and re.match(r"^r\d+|^lr|^ip", ops):
            indirect[func] = indirect.get(func, 0) + 1
            continue
        call = CALL.match(mnem)
        if not (call or BRANCH.match(mnem)):
            continue
        m = TARGET.match(ops)
        if not m:
            continue
        target = int(m.group(1), 16)
        callee = owner(starts, target)
        if callee is None:
            continue
        if callee == func:
            # A call to its own entry recurses; a branch within is a loop.
            if call and target == func:
                edges[func].add(func)
            continue
        edges[func].add(callee)
    return edges, indirect


def cycles(edges):
    """Strongly connected components that are cycles, by Tarjan's algorithm
    written with an explicit stack (no recursion here either)."""
    index, low, on_stack = {}, {}, set()
    stack, found, counter = [], [], 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges[node]:
                    found.append(sorted(component))
    return found


def check(lines, out=sys.stdout):
    """Returns 0 when core cannot recurse, 1 otherwise; writes the findings."""
    starts, names, body = parse(lines)
    core = [s for s in starts if is_core(names[s])]
    if not core:
        print("call graph: no pagoda-core function found; wrong input?", file=out)
        return 1
    edges, indirect = graph(starts, body)
    status = 0
    for component in cycles(edges):
        listed = ", ".join(names[f] for f in component)
        where = "through pagoda-core" if any(is_core(names[f]) for f in component) else "in the firmware"
        print(f"call graph: RECURSION {where}: {listed}", file=out)
        status = 1
    for func, count in sorted(indirect.items()):
        if is_core(names[func]):
            print(f"call graph: INDIRECT call in pagoda-core: {names[func]} ({count})", file=out)
            status = 1
    outside = sum(c for f, c in indirect.items() if not is_core(names[f]))
    calls = sum(len(e) for e in edges.values())
    print(
        f"call graph: {len(starts)} functions ({len(core)} of pagoda-core), "
        f"{calls} direct call edges, {outside} indirect call sites outside core; "
        + ("no recursion" if status == 0 else "FAILED"),
        file=out,
    )
    return status


SAMPLE = """
00000100 <main>:
     100:\tbl\t200 <pagoda_core::a>
     104:\tb.n\t100 <main>
00000200 <pagoda_core::a>:
     200:\tbl\t300 <<pagoda_core::B as x::Y>::b>
     204:\tb.n\t200 <pagoda_core::a>
     206:\tbx\tlr
00000300 <<pagoda_core::B as x::Y>::b>:
     300:\tbeq.w\t400 <core::fmt::write>
     304:\tbx\tlr
00000400 <core::fmt::write>:
     400:\tblx\tr3
     402:\tb.n\t400 <core::fmt::write>
"""


def self_test():
    """The checker catches what it must and passes what it should."""
    import io

    def run(text):
        buf = io.StringIO()
        return check(text.strip("\n").split("\n"), buf), buf.getvalue()

    ok, text = run(SAMPLE)
    assert ok == 0, text  # loops and fmt's blx are no recursion
    assert "no recursion" in text, text
    # Recursion outside core's names (core inlined into it) is refused too.
    ok, text = run(SAMPLE.replace("b.n\t400 <core::fmt::write>", "bl\t400 <core::fmt::write>"))
    assert ok == 1 and "RECURSION in the firmware" in text, text
    # b tail-calls back into a: a two-function cycle through core.
    ok, text = run(SAMPLE.replace("beq.w\t400 <core::fmt::write>", "b.w\t200 <pagoda_core::a>"))
    assert ok == 1 and "RECURSION through pagoda-core" in text, text
    # a calls its own entry.
    ok, text = run(SAMPLE.replace("b.n\t200 <pagoda_core::a>", "bl\t200 <pagoda_core::a>"))
    assert ok == 1 and "RECURSION" in text, text
    # A call into the middle of another function still names that function.
    ok, text = run(SAMPLE.replace("beq.w\t400 <core::fmt::write>", "bl\t204 <pagoda_core::a+0x4>"))
    assert ok == 1 and "RECURSION" in text, text
    # An indirect call inside core.
    ok, text = run(SAMPLE.replace("bx\tlr\n00000300", "blx\tr2\n00000300"))
    assert ok == 1 and "INDIRECT" in text, text
    # No core at all: the input is wrong, not clean.
    ok, _ = run("00000100 <main>:\n     100:\tbx\tlr")
    assert ok == 1
    print("call graph checker self-test: passed")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        return check(f.read().splitlines())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
