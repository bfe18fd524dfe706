"""Probe: how many bytes per second one SM can bring from L2 into shared memory, by TMA, by cp.async, and by
both at once, with no math: the ingest ceiling of a persistent GEMM's producer.

A persistent grid (one program per SM unless --programs says otherwise) streams an L2-resident buffer of
128-byte rows (fp8, the width of one 128-deep K block) into a ring of STAGES slots: a producer warp issues TMA
loads of TMA_ROWS rows per slot, a producer warp group issues cp.async copies of CP_ROWS rows per slot (16 bytes
per thread and copy), and a consumer warp group waits for each slot and hands it back, as the GEMM's consumers
do after their wgmma. A 128x128x128 fp8 block of the GEMM needs 256 rows (A's 128 and B's 128): at 15 dense
TFLOP/s per SM it takes 0.28 us, 117 GB/s of ingest per SM.

    python tools/probe_tma_ingest.py [--forms 6:256:0,6:128:128,6:0:256] [--programs 132] [--json PATH]
"""
from __future__ import annotations

import argparse
import json

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

ROW_BYTES = 128
BUFFER_MB = 32          # L2-resident (the H200 has 50 MB of L2)
MAX_BOX_ROWS = 256      # a TMA box spans at most 256 rows


@gluon.jit
def _drain(full, empty, total, STAGES: gl.constexpr):
    for c in range(total):
        mbarrier.wait(full.index(c % STAGES), (c // STAGES) & 1)
        mbarrier.arrive(empty.index(c % STAGES), count=1)


@gluon.jit
def _tma_producer(desc, full, empty, tma_bufs, total, rows, STAGES: gl.constexpr, TMA_ROWS: gl.constexpr,
                  STAGE_ROWS: gl.constexpr):
    BOX: gl.constexpr = desc.block_type.shape[0]
    for p in range(total):
        slot = p % STAGES
        mbarrier.wait(empty.index(slot), ((p // STAGES) & 1) ^ 1)
        row = ((gl.program_id(0) * total + p) * STAGE_ROWS) % rows
        bar = full.index(slot)
        mbarrier.expect(bar, TMA_ROWS * desc.block_type.shape[1])
        for i in gl.static_range(TMA_ROWS // BOX):
            tma.async_copy_global_to_shared(desc, [row + i * BOX, 0], bar, tma_bufs.index(slot * (TMA_ROWS // BOX) + i))


@gluon.jit
def _cp_producer(src, full, empty, cp_bufs, total, rows, STAGES: gl.constexpr, TMA_ROWS: gl.constexpr,
                 CP_ROWS: gl.constexpr, STAGE_ROWS: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0])   # 16 bytes a thread, rows of 128 B
    r = gl.arange(0, CP_ROWS, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, 128, layout=gl.SliceLayout(0, layout))
    for p in range(total):
        slot = p % STAGES
        mbarrier.wait(empty.index(slot), ((p // STAGES) & 1) ^ 1)
        row = ((gl.program_id(0) * total + p) * STAGE_ROWS) % rows + TMA_ROWS
        ptrs = src + gl.expand_dims((row + r).to(gl.int64) * 128, 1) + gl.expand_dims(cols, 0)
        async_copy.async_copy_global_to_shared(cp_bufs.index(slot), ptrs)
        async_copy.mbarrier_arrive(full.index(slot), increment_count=False)   # counts as one of the 128 arrivals


@gluon.jit
def ingest_kernel(desc, src, rows, total, STAGES: gl.constexpr, TMA_ROWS: gl.constexpr, CP_ROWS: gl.constexpr):
    STAGE_ROWS: gl.constexpr = TMA_ROWS + CP_ROWS
    BOX: gl.constexpr = desc.block_type.shape[0]
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        # a TMA producer's expect is one arrival; each cp.async thread's arrive is one more
        mbarrier.init(full.index(i), count=(1 if TMA_ROWS > 0 else 0) + (128 if CP_ROWS > 0 else 0))
        mbarrier.init(empty.index(i), count=1)
    if TMA_ROWS > 0 and CP_ROWS > 0:
        tma_bufs = gl.allocate_shared_memory(desc.dtype, [STAGES * (TMA_ROWS // BOX), BOX, 128], desc.layout)
        cp_bufs = gl.allocate_shared_memory(desc.dtype, [STAGES, CP_ROWS, 128], desc.layout)
        gl.warp_specialize([(_drain, (full, empty, total, STAGES)),
                            (_tma_producer, (desc, full, empty, tma_bufs, total, rows, STAGES, TMA_ROWS, STAGE_ROWS)),
                            (_cp_producer, (src, full, empty, cp_bufs, total, rows, STAGES, TMA_ROWS, CP_ROWS,
                                            STAGE_ROWS))], [1, 4], [40, 80])
    elif TMA_ROWS > 0:
        tma_bufs = gl.allocate_shared_memory(desc.dtype, [STAGES * (TMA_ROWS // BOX), BOX, 128], desc.layout)
        gl.warp_specialize([(_drain, (full, empty, total, STAGES)),
                            (_tma_producer, (desc, full, empty, tma_bufs, total, rows, STAGES, TMA_ROWS, STAGE_ROWS))],
                           [1], [40])
    else:
        cp_bufs = gl.allocate_shared_memory(desc.dtype, [STAGES, CP_ROWS, 128], desc.layout)
        gl.warp_specialize([(_drain, (full, empty, total, STAGES)),
                            (_cp_producer, (src, full, empty, cp_bufs, total, rows, STAGES, TMA_ROWS, CP_ROWS,
                                            STAGE_ROWS))], [4], [80])


def measure(buf: torch.Tensor, stages: int, tma_rows: int, cp_rows: int, programs: int, total: int) -> dict:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    box = min(MAX_BOX_ROWS, tma_rows) if tma_rows else 64
    layout = gl.NVMMASharedLayout.get_default_for([box, ROW_BYTES], gl.float8e4nv)
    desc = TensorDescriptor.from_tensor(buf, [box, ROW_BYTES], layout)
    rows = buf.shape[0]
    launch = lambda: ingest_kernel[(programs,)](desc, buf, rows, total, STAGES=stages, TMA_ROWS=tma_rows,
                                                CP_ROWS=cp_rows, num_warps=4)
    launch()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    repeats = 10
    start.record()
    for _ in range(repeats):
        launch()
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / repeats
    moved = programs * total * (tma_rows + cp_rows) * ROW_BYTES
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return {"stages": stages, "tma_rows": tma_rows, "cp_rows": cp_rows, "programs": programs, "us": seconds * 1e6,
            "tb_per_s": moved / seconds / 1e12, "gb_per_s_per_sm": moved / seconds / 1e9 / sms}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--forms", default="6:256:0,4:256:0,8:128:0,6:128:128,6:0:256,6:192:64,3:256:0",
                        help="STAGES:TMA_ROWS:CP_ROWS, comma separated")
    parser.add_argument("--programs", default="132,264", help="grid sizes (one per SM, two per SM)")
    parser.add_argument("--blocks", type=int, default=2000, help="slots each program fills")
    parser.add_argument("--json")
    opts = parser.parse_args()
    buf = torch.randint(-100, 100, (BUFFER_MB * 2**20 // ROW_BYTES, ROW_BYTES), device="cuda",
                        dtype=torch.int8).view(torch.float8_e4m3fn)
    rows = []
    for form in opts.forms.split(","):
        stages, tma_rows, cp_rows = (int(v) for v in form.split(":"))
        for programs in (int(p) for p in opts.programs.split(",")):
            try:
                row = measure(buf, stages, tma_rows, cp_rows, programs, opts.blocks)
            except (triton.CompilationError, triton.OutOfResources, RuntimeError) as exc:   # recorded per form
                row = {"stages": stages, "tma_rows": tma_rows, "cp_rows": cp_rows, "programs": programs,
                       "error": str(exc)[:300]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "triton": triton.__version__,
                       "buffer_mb": BUFFER_MB, "row_bytes": ROW_BYTES, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
