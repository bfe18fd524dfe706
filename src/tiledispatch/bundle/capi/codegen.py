"""Generate the C of the library from the plans: the dispatch table (problem keys, kernels with their cubins
embedded as string literals, launches, argument recipes, TMA encodings, workspaces) between the fixed
prelude and runtime of c_runtime.py, and compile it with the system C compiler.

The output is deterministic: the same plans and cubins give the same source, byte for byte.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from tiledispatch.bundle.capi.c_runtime import PRELUDE, RUNTIME
from tiledispatch.bundle.capi.problems import fnv1a
from tiledispatch.errors import BundleError

ARG_KINDS = {"ptr": 0, "null": 1, "ws": 2, "const": 3, "alpha_f32": 4, "alpha_i32": 5, "tma": 6}
WORKSPACE_ALIGN = 256
CFLAGS = ("-O2", "-shared", "-fPIC", "-Wall", "-Werror", "-std=gnu11")
_PRINTABLE = {c for c in range(32, 127)} - {ord('"'), ord("\\"), ord("?")}


def c_string(data: bytes, width: int = 100) -> str:
    """`data` as adjacent C string literals: printable bytes as themselves, the rest as 3-digit octal."""
    lines, line = [], []
    size = 0
    for byte in data:
        piece = chr(byte) if byte in _PRINTABLE else f"\\{byte:03o}"
        line.append(piece)
        size += len(piece)
        if size >= width:
            lines.append('"' + "".join(line) + '"')
            line, size = [], 0
    if line or not lines:
        lines.append('"' + "".join(line) + '"')
    return "\n  ".join(lines)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def generate(plans: list[dict[str, Any]], arch: str, cc: int) -> str:
    """The library's C source for `plans` (CapiPlan.to_dict() each) on `arch` (compute capability `cc`)."""
    kernels: dict[str, int] = {}
    images: list[str] = []
    kernel_rows: list[str] = []
    args: list[str] = []
    tmas: list[str] = []
    launches: list[str] = []
    workspaces: list[str] = []
    rows: list[str] = []
    keys: list[int] = []
    max_args = max_tma = max_launches = 1
    for plan in plans:
        first_launch, first_ws = len(launches), len(workspaces)
        offset = 0
        for ws in plan["workspaces"]:
            workspaces.append(f"{{{offset}ull, {ws['bytes']}ull, {int(ws['zeroed'])}}}")
            offset += -(-max(ws["bytes"], 1) // WORKSPACE_ALIGN) * WORKSPACE_ALIGN
        for launch in plan["launches"]:
            index = kernels.get(launch["kernel"])
            if index is None:
                index = kernels[launch["kernel"]] = len(kernel_rows)
                data = Path(launch["cubin"]).read_bytes()
                images.append(f"/* {launch['kernel']} */\n"
                              f"static const unsigned char td_image_{index}[{len(data)}] =\n"
                              f"  {c_string(data)};\n")
                kernel_rows.append(f"{{td_image_{index}, {_quoted(launch['function'])}, "
                                   f"{launch['num_warps']}, {launch['num_ctas']}, {launch['shared']}, "
                                   f"{int(launch['cooperative'])}, {int(launch['pdl'])}}}")
            first_arg, first_tma = len(args), len(tmas)
            args += [_arg(item, first_ws) for item in launch["args"]]
            tmas += [_tma(t) for t in launch["tma"]]
            scratch = -1 if launch["scratch"] < 0 else first_ws + launch["scratch"]
            gx, gy, gz = launch["grid"]
            launches.append(f"{{{index}, {{{gx}u, {gy}u, {gz}u}}, {first_arg}, {len(launch['args'])}, "
                            f"{first_tma}, {len(launch['tma'])}, {scratch}}}")
            max_args, max_tma = max(max_args, len(launch["args"])), max(max_tma, len(launch["tma"]))
        max_launches = max(max_launches, len(plan["launches"]))
        key = plan["key"]
        rows.append(f"{{{key[0]}, {len(keys)}, {len(key)}, {fnv1a(key)}ull, {_quoted(plan['instance'])}, "
                    f"{first_launch}, {len(plan['launches'])}, {first_ws}, {len(plan['workspaces'])}, "
                    f"{max(offset, WORKSPACE_ALIGN)}ull}}")
        keys += key
    defines = [f'#define TD_ARCH "{arch}"', f"#define TD_ARCH_CC {cc}", f"#define TD_N_PLANS {len(rows)}",
               f"#define TD_N_KERNELS {len(kernel_rows)}", f"#define TD_MAX_ARGS {max_args}",
               f"#define TD_MAX_TMA {max_tma}", f"#define TD_MAX_LAUNCHES {max_launches}"]
    table = [
        "/* ---- the dispatch table (generated) ---- */", *defines, "", *images,
        _array("td_kernel", "td_kernels", kernel_rows),
        _array("td_arg", "td_args", args + ["{0, 0, 0, 0}"]),
        _array("td_tma", "td_tmas", tmas + ["{0, 0, 0, 0, {0}, {0}, {0}}"]),
        _array("td_launch", "td_launches", launches),
        _array("td_workspace", "td_workspaces_table", workspaces + ["{0, 0, 0}"]),
        _array("int64_t", "td_keys", [", ".join(f"{v}ll" for v in keys[i:i + 12])
                                      for i in range(0, len(keys), 12)]),
        _array("td_plan", "td_plans", rows),
    ]
    banner = "/* Generated by tiledispatch export-capi: do not edit. */\n"
    return banner + PRELUDE + "\n".join(table) + RUNTIME


def _array(ctype: str, name: str, rows: list[str]) -> str:
    body = ",\n  ".join(rows)
    return f"static const {ctype} {name}[] = {{\n  {body}\n}};\n"


def _arg(item: list[Any], first_ws: int) -> str:
    kind = item[0]
    if kind == "ptr":
        return f"{{{ARG_KINDS['ptr']}, 8, {item[1]}, 0}}"
    if kind == "null":
        return f"{{{ARG_KINDS['null']}, 8, 0, 0}}"
    if kind == "ws":
        return f"{{{ARG_KINDS['ws']}, 8, {first_ws + item[1]}, 0}}"
    if kind == "const":
        return f"{{{ARG_KINDS['const']}, {item[1]}, 0, {item[2]}ull}}"
    if kind == "alpha":
        return f"{{{ARG_KINDS['alpha_' + item[1]]}, 4, 0, 0}}"
    if kind == "tma":
        return f"{{{ARG_KINDS['tma']}, 128, {item[1]}, 0}}"
    raise BundleError(f"unknown argument recipe item {item!r}", field="plan")


def _tma(t: dict[str, Any]) -> str:
    def values(v: list[int], suffix: str) -> str:
        return "{" + ", ".join(f"{x}{suffix}" for x in v) + "}"

    return (f"{{{t['role']}, {t['rank']}, {t['dtype']}, {t['swizzle']}, {values(t['dims'], 'ull')}, "
            f"{values(t['strides'] or [0], 'ull')}, {values(t['box'], 'u')}}}")


def cuda_include() -> Path:
    """The folder of cuda.h: Triton ships the CUDA driver API headers with its NVIDIA backend."""
    import triton

    folder = Path(triton.__file__).parent / "backends" / "nvidia" / "include"
    if not (folder / "cuda.h").is_file():
        raise BundleError(f"cuda.h is not in {folder} (Triton's NVIDIA backend headers); pass include=",
                          field="include")
    return folder


def compile_library(source: Path, out: Path, compiler: str = "gcc", include: Path | None = None) -> list[str]:
    """Compile the generated `source` (tiledispatch.h beside it) into the shared library `out`; returns the
    command. Raises BundleError with the compiler's output on failure."""
    cc = shutil.which(compiler)
    if cc is None:
        raise BundleError(f"C compiler {compiler!r} not found on PATH", field="compiler")
    command = [cc, *CFLAGS, f"-I{source.parent}", f"-I{include or cuda_include()}", str(source), "-o",
               str(out), "-ldl", "-lpthread"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BundleError(f"compiling {source.name} failed ({' '.join(command)}):\n{done.stderr[-4000:]}",
                          field="compiler")
    if done.stderr.strip():   # -Werror: any warning fails, so this is only notes
        raise BundleError(f"compiling {source.name} printed: {done.stderr[-2000:]}", field="compiler")
    return command
