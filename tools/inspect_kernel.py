"""Static profile of kernel instances without a GPU: compile each named config for sm_90 and print, per entry,
registers, spills, shared memory and a histogram of SASS instruction classes (global loads and their width,
local-memory spill traffic, FMAs, tensor-core ops, shared-memory traffic, branches). Used to compare kernel
designs before measuring them. --ptxas adds ptxas's own report (stack frame, spill store / load bytes): it
recompiles past Triton's cache. --json writes the numbers, one record per entry.

    python tools/inspect_kernel.py NAME [NAME ...] [--entry SUBSTRING] [--sass] [--ptxas] [--json PATH]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CLASSES = (  # (label, regex on the SASS opcode)
    ("LDG", r"^LDG"), ("LDG.128", r"^LDG.*\.128"), ("LDG.64", r"^LDG.*\.64"), ("STG", r"^STG"),
    ("LDS", r"^LDS"), ("STS", r"^STS"), ("LDSM", r"^LDSM"), ("LDGSTS", r"^LDGSTS"), ("UTMALDG", r"^UTMA"),
    ("FFMA", r"^FFMA"), ("HFMA2", r"^HFMA2"), ("HMMA", r"^HMMA"), ("HGMMA", r"^HGMMA"),
    ("F2F/cvt", r"^(F2F|F2FP|PRMT)"), ("IMAD", r"^IMAD"), ("LEA/IADD", r"^(LEA|IADD3)"), ("ISETP", r"^ISETP"),
    ("BRA", r"^BRA"), ("BAR", r"^BAR"), ("SHFL", r"^SHFL"), ("LDL", r"^LDL"), ("STL", r"^STL"),
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
    found = [(m, ln) for ln in text.splitlines() if (m := re.match(r"\s*/\*([0-9a-f]+)\*/", ln))]
    lines = [ln for _, ln in found]
    address = [int(m.group(1), 16) for m, _ in found]
    out = []
    for i, line in enumerate(lines):
        m = re.search(r"BRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))", line)
        if m and m.group(1) and int(m.group(1), 16) < address[i]:
            start = address.index(int(m.group(1), 16))
            out.append((i - start + 1, histogram("\n".join(lines[start:i + 1]))))
    return out


def ptxas_report(log: str) -> dict[str, dict[str, int]]:
    """Per function of a `ptxas -v` log: registers, stack frame and spill store / load bytes."""
    out: dict[str, dict[str, int]] = {}
    pattern = (r"Function properties for (\w+)\s+(\d+) bytes stack frame, (\d+) bytes spill stores, "
               r"(\d+) bytes spill loads\s+ptxas info\s*: Used (\d+) registers")
    for m in re.finditer(pattern, log):
        out[m.group(1)] = {"stack_frame": int(m.group(2)), "spill_stores": int(m.group(3)),
                           "spill_loads": int(m.group(4)), "registers": int(m.group(5))}
    return out


def _compile(name: str, out: Path, with_ptxas: bool) -> tuple[dict[str, dict], dict[str, dict[str, int]]]:
    """compile_entries of `name` into `out`; with_ptxas: past Triton's cache, keeping ptxas's -v report."""
    import triton

    from tiledispatch.build.compile import compile_entries
    from tiledispatch.codegen.render import render_source
    from tiledispatch.configs.naming import parse_name
    from tiledispatch.configs.vendor import VendorConfig

    cfg = parse_name(name)
    if isinstance(cfg, VendorConfig):
        raise SystemExit(f"{name}: a vendor instance has no source to compile")
    (out / "kernel.py").write_text(render_source(cfg))
    if not with_ptxas:
        return compile_entries(out / "kernel.py", 90, out), {}
    log = io.StringIO()
    with triton.knobs.compilation.scope(), triton.knobs.nvidia.scope(), contextlib.redirect_stdout(log):
        triton.knobs.compilation.always_compile = True
        triton.knobs.nvidia.dump_ptxas_log = True
        resources = compile_entries(out / "kernel.py", 90, out)
    return resources, ptxas_report(log.getvalue())


def inspect(name: str, entry_filter: str, show_sass: bool, with_ptxas: bool = False) -> list[dict[str, Any]]:
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        resources, report = _compile(name, out, with_ptxas)
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
            if fn in report:
                spills = report[fn]
                print(f"    ptxas: {spills['spill_stores']} B spill stores, {spills['spill_loads']} B spill "
                      f"loads, {spills['stack_frame']} B stack frame")
            print("    " + ", ".join(f"{k} {v}" for k, v in counts.items()))
            body_counts = loops(text)
            for length, body in body_counts:
                classes = ", ".join(f"{k} {v}" for k, v in body.items() if k != "total")
                print(f"    loop of {length}: {classes}")
            if show_sass:
                print(text)
            records.append({"name": name, "entry": fn, "shared": res["shared"], "num_warps": res["num_warps"],
                            "regs": int(regs.group(1)) if regs else None,
                            "stack": int(stack.group(1)) if stack else None, "ptxas": report.get(fn),
                            "sass": dict(counts), "loops": [dict(body) for _, body in body_counts]})
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+")
    parser.add_argument("--entry", default="", help="only entries whose function name contains this")
    parser.add_argument("--sass", action="store_true", help="print the SASS too")
    parser.add_argument("--ptxas", action="store_true", help="ptxas's spill report too (recompiles)")
    parser.add_argument("--json", help="write the numbers here, one record per entry")
    args = parser.parse_args()
    records = []
    for name in args.names:
        records += inspect(name, args.entry, args.sass, args.ptxas)
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
