"""Static profile of kernel instances without a GPU: compile each named config for sm_90 and print, per entry,
registers, spills, shared memory and a histogram of SASS instruction classes (global loads and their width,
FMAs, tensor-core ops, shared-memory traffic, branches). Used to compare kernel designs before measuring them.

    python tools/inspect_kernel.py NAME [NAME ...] [--entry SUBSTRING] [--sass]
"""
from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CLASSES = (  # (label, regex on the SASS opcode)
    ("LDG", r"^LDG"), ("LDG.128", r"^LDG.*\.128"), ("LDG.64", r"^LDG.*\.64"), ("STG", r"^STG"),
    ("LDS", r"^LDS"), ("STS", r"^STS"), ("LDSM", r"^LDSM"), ("LDGSTS", r"^LDGSTS"), ("UTMALDG", r"^UTMA"),
    ("FFMA", r"^FFMA"), ("HFMA2", r"^HFMA2"), ("HMMA", r"^HMMA"), ("HGMMA", r"^HGMMA"), ("F2F/cvt", r"^(F2F|F2FP|PRMT)"),
    ("IMAD", r"^IMAD"), ("LEA/IADD", r"^(LEA|IADD3)"), ("ISETP", r"^ISETP"), ("BRA", r"^BRA"), ("BAR", r"^BAR"),
    ("SHFL", r"^SHFL"),
)


def _tool(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def sass(cubin: Path) -> str:
    return subprocess.run([_tool("cuobjdump"), "-sass", str(cubin)], check=True, capture_output=True,
                          text=True).stdout


def histogram(text: str) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if not m:
            continue
        op = m.group(1)
        counts["total"] += 1
        for label, pattern in CLASSES:
            if re.match(pattern, op):
                counts[label] += 1
    return counts


def loops(text: str) -> list[tuple[int, collections.Counter]]:
    """(length, histogram) of every backward branch's body: the loops, innermost first by address."""
    lines = [ln for ln in text.splitlines() if re.match(r"\s*/\*[0-9a-f]+\*/", ln)]
    address = [int(re.match(r"\s*/\*([0-9a-f]+)\*/", ln).group(1), 16) for ln in lines]
    out = []
    for i, line in enumerate(lines):
        m = re.search(r"BRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))", line)
        if m and m.group(1) and int(m.group(1), 16) < address[i]:
            start = address.index(int(m.group(1), 16))
            out.append((i - start + 1, histogram("\n".join(lines[start:i + 1]))))
    return out


def inspect(name: str, entry_filter: str, show_sass: bool) -> None:
    from tiledispatch.build.compile import compile_entries
    from tiledispatch.codegen.render import render_source
    from tiledispatch.configs.naming import parse_name

    cfg = parse_name(name)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        (out / "kernel.py").write_text(render_source(cfg))
        resources = compile_entries(out / "kernel.py", 90, out)
        print(f"== {name}")
        for fn, res in resources.items():
            if entry_filter not in fn:
                continue
            text = sass(out / f"{fn}.cubin")
            usage = subprocess.run([_tool("cuobjdump"), "-res-usage", str(out / f"{fn}.cubin")], check=True,
                                   capture_output=True, text=True).stdout
            regs = re.search(r"REG:(\d+)", usage)
            stack = re.search(r"STACK:(\d+)", usage)
            counts = histogram(text)
            print(f"  {fn}: shared {res['shared']} B, warps {res['num_warps']}, "
                  f"regs {regs.group(1) if regs else '?'}, stack {stack.group(1) if stack else '?'}")
            print("    " + ", ".join(f"{k} {v}" for k, v in counts.items()))
            for length, body in loops(text):
                print(f"    loop of {length}: " + ", ".join(f"{k} {v}" for k, v in body.items() if k != "total"))
            if show_sass:
                print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+")
    parser.add_argument("--entry", default="", help="only entries whose function name contains this")
    parser.add_argument("--sass", action="store_true", help="print the SASS too")
    args = parser.parse_args()
    for name in args.names:
        inspect(name, args.entry, args.sass)


if __name__ == "__main__":
    sys.exit(main())
