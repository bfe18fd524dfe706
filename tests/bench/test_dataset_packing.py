"""Compaction packs a dataset's rows into one part with the packed encoding (zstd 19, no dictionary for float
columns, tagged in the schema metadata): the same rows, a single default-encoded part (a sweep's batch) is
packed too, and a packed part is left as it is."""
from __future__ import annotations

import pyarrow.parquet as pq

from tiledispatch.bench.dataset import Dataset
from tiledispatch.bench.schema import Outcome, make_row
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.problems.gemm import GemmProblem

CONFIGS = (GemmConfig(dtype="bf16", block_m=64, block_n=64),
           GemmConfig(dtype="bf16", family="splitk", split_k=4),
           GemmConfig(dtype="bf16", block_m=128, block_n=64))
STAMP = {"gpu": "NVIDIA H200", "arch": "sm_90", "triton": "3.6.0", "timestamp": "2025-03-04T05:06:07"}


def _rows(m: int) -> list[dict]:
    problem = GemmProblem(m, 96, 80, dtype="bf16")
    return [make_row(problem, "t", c.name, c, Outcome("ok", time_ms=0.01 * m + 0.001 * i), STAMP)
            for i, c in enumerate(CONFIGS)]


def _dataset(tmp_path, batches: int) -> Dataset:
    dataset = Dataset(tmp_path / "d")
    dataset.open("gemm", "none", "bf16", STAMP["gpu"], resume=False, extra={})
    for b in range(batches):
        dataset.append(_rows(64 + 16 * b))
    return dataset


def _float_columns_use_no_dictionary(part) -> bool:
    meta = pq.ParquetFile(part).metadata
    schema = pq.read_schema(part)
    for i in range(meta.num_columns):
        column = meta.row_group(0).column(i)
        floating = str(schema.field(column.path_in_schema).type) in ("double", "float")
        if floating and column.has_dictionary_page:
            return False
    return True


def test_compaction_packs_the_rows_into_one_part(tmp_path):
    dataset = _dataset(tmp_path, 3)
    before = dataset.frame()
    part = dataset.compact()
    assert dataset.parts() == [part]
    assert dataset.frame().equals(before)
    assert _float_columns_use_no_dictionary(part)


def test_a_single_sweep_part_is_packed_and_a_packed_one_stays(tmp_path):
    dataset = _dataset(tmp_path, 1)
    (sweep_part,) = dataset.parts()
    assert not _float_columns_use_no_dictionary(sweep_part)   # the default encoding: what packing changes
    before = dataset.frame()
    packed = dataset.compact()
    assert packed != sweep_part and dataset.parts() == [packed] and not sweep_part.exists()
    assert dataset.frame().equals(before)
    assert dataset.compact() == packed and dataset.parts() == [packed]
