"""CostModel: a LightGBM booster for one (arch, op, direction, dtype) and the metadata that says what it is.

    DIR/model.txt.gz the booster (LightGBM's text format, gzip-compressed)
    DIR/meta.json    format, arch, op, direction, dtype, kind, feature spec, the kernel kinds of the data,
                     data hash, rows / problems trained on, the held-out problems, GPU, versions, creation
                     date, training report

kind 'regressor' predicts log2 of the run time in µs over the problem's roofline time (the roofline is added
back, so scores are predicted log2 µs); kind 'ranker' is LambdaRank grouped by problem (scores are its negated
output). Either way `scores` is lower-is-better. A model of another arch or feature spec version is refused
(ModelMismatch), never used. A kernel kind (`kernel_kind`: family, and k-loop for convolutions) absent from
the training data is one the model cannot judge: `knows` says so, and selection does not let the model rank
it.
"""
from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tiledispatch.arch.spec import ArchSpec, normalize_arch
from tiledispatch.bench import schema
from tiledispatch.errors import BadInput, InvalidConfig
from tiledispatch.fsutil import atomic_write_bytes, atomic_write_text
from tiledispatch.ml.features import feature_matrix, feature_names, spec_version

FORMAT = "tiledispatch-cost-model"
FORMAT_VERSION = 3   # 2: meta names the kernel kinds of the training data; 3: the booster gzip-compressed
KINDS = ("regressor", "ranker")
MODEL_FILE = "model.txt.gz"   # LightGBM's text format, gzip-compressed (a quarter of the bytes)
META_FILE = "meta.json"
OFFSET_FEATURE = "roofline_log_us"   # what the regressor's target is relative to


class ModelMismatch(InvalidConfig):
    """A cost model that does not fit the request (another arch, feature spec, op, direction or dtype)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="model")


def kernel_kind(config: Any) -> str:
    """What a model must have seen measured to rank a config: its family (conv: its k-loop, and for the
    direct family whether it unrolls filter taps)."""
    if config.family == "vendor" or config.op != "conv":
        return config.family
    unrolled = "/unrolled" if config.family == "direct" and config.block_k > 1 else ""
    return f"{config.family}/{config.kloop}{unrolled}"


def data_kernel_kinds(frame) -> list[str]:
    """The kernel kinds of dataset rows (kernel rows: their names parse to configs)."""
    from tiledispatch.configs.naming import parse_name

    return sorted({kernel_kind(parse_name(name)) for name in frame["kernel"].unique()})


def _arch_name(arch: ArchSpec | str) -> str:
    return arch.name if isinstance(arch, ArchSpec) else normalize_arch(arch)


class CostModel:
    """A trained booster plus its metadata (see the module docstring)."""

    def __init__(self, booster: Any, meta: dict[str, Any]) -> None:
        self.booster = booster
        self.meta = meta
        names = list(meta["feature_spec"]["names"])
        self._offset = names.index(OFFSET_FEATURE) if meta["kind"] == "regressor" else None

    # -- identity -----------------------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def key(self) -> tuple[str, str, str, str]:
        """(arch, op, direction, dtype): what the model ranks."""
        return self.meta["arch"], self.meta["op"], self.meta["direction"], self.meta["dtype"]

    def describe(self) -> str:
        arch, op, direction, dtype = self.key
        trained = self.meta.get("trained_dtype")
        of = f" (trained on {trained} sweeps)" if trained and trained != dtype else ""
        return f"{self.kind} for {arch} {op} {direction} {dtype}{of}"

    def standing_in(self, dtype: str) -> CostModel:
        """This model ranking problems of `dtype` as well: the same booster, keyed to `dtype`. Only for dtypes
        whose kernels and features equal the trained dtype's (select/cost_model.STAND_IN says which)."""
        trained = self.meta.get("trained_dtype", self.meta["dtype"])
        return CostModel(self.booster, {**self.meta, "dtype": dtype, "trained_dtype": trained})

    def knows(self, config: Any) -> bool:
        """Whether kernels of config's kind were in the training data (else the model cannot rank it)."""
        return kernel_kind(config) in self.meta["kernel_kinds"]

    def check_problem(self, problem: Any) -> None:
        """Raise ModelMismatch unless the model ranks kernels of problems like `problem`."""
        want = (schema.op_of(problem), schema.direction_of(problem), problem.dtype)
        if want != self.key[1:]:
            raise ModelMismatch(f"the cost model is a {self.describe()}; the problem is {' '.join(want)}")

    # -- scoring ------------------------------------------------------------------------------------------
    def scores_of(self, matrix):
        """Lower-is-better scores of rows of a feature matrix (spec order)."""
        import numpy as np

        if not len(matrix):
            return np.zeros(0)
        raw = self.booster.predict(matrix, num_threads=1)
        if self.kind == "regressor":
            return raw + matrix[:, self._offset]
        return -raw

    def scores(self, problem: Any, configs: Sequence[Any], arch: ArchSpec):
        """One lower-is-better score per config for `problem` (predicted log2 µs, or negated ranker score).

        `problem` is the request as the caller has it (not padded): whether a config runs it on zero-padded
        operands is derived from the alignments, as the sweep and `select` decide it, and priced in. `configs`
        should be the ones that can run it (directly or padded); `arch` the target (its SM count is used)."""
        self.check_problem(problem)
        if _arch_name(arch) != self.meta["arch"]:
            raise ModelMismatch(f"the cost model was trained for {self.meta['arch']}, not {_arch_name(arch)}")
        return self.scores_of(feature_matrix(problem, configs, arch))

    # -- files --------------------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write MODEL_FILE and meta.json into `directory` (created; each file written atomically; the
        compressed bytes depend on the booster alone)."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        text = self.booster.model_to_string().encode()
        atomic_write_bytes(path / MODEL_FILE, gzip.compress(text, compresslevel=9, mtime=0))
        atomic_write_text(path / META_FILE, json.dumps(self.meta, indent=1, sort_keys=False, default=str))
        return path

    @classmethod
    def load(cls, directory: str | Path, arch: ArchSpec | str | None = None,
             spec_version: int | None = None) -> CostModel:
        """The model in `directory`; ModelMismatch when it was trained for another arch (arch=None: any) or
        another feature spec version than `spec_version` (default: this tiledispatch's for the model's op)."""
        import lightgbm as lgb

        meta = read_meta(directory)
        if arch is not None and _arch_name(arch) != meta["arch"]:
            raise ModelMismatch(f"the cost model in {directory} was trained for {meta['arch']}, not "
                                f"{_arch_name(arch)}: retrain it on data of that arch")
        check_spec(meta, spec_version, directory)
        try:
            booster = lgb.Booster(model_str=model_text(directory))
        except FileNotFoundError:
            raise BadInput(f"{directory} has no {MODEL_FILE}", field="model") from None
        except (OSError, EOFError, UnicodeDecodeError, lgb.basic.LightGBMError) as exc:
            raise InvalidConfig(f"{directory}/{MODEL_FILE} is not a LightGBM model ({exc})",
                                field="model") from exc
        if booster.num_feature() != len(meta["feature_spec"]["names"]):
            raise ModelMismatch(f"{directory}: the booster reads {booster.num_feature()} features, its spec "
                                f"names {len(meta['feature_spec']['names'])}")
        return cls(booster, meta)


def model_text(directory: str | Path) -> str:
    """The booster of a model directory in LightGBM's text format (MODEL_FILE decompressed)."""
    return gzip.decompress((Path(directory) / MODEL_FILE).read_bytes()).decode()


def read_meta(directory: str | Path) -> dict[str, Any]:
    """meta.json of a model directory, its format checked."""
    path = Path(directory) / META_FILE
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise BadInput(f"{directory} is not a cost model (no {META_FILE})", field="model") from None
    except ValueError as exc:
        raise InvalidConfig(f"{path} is not valid JSON ({exc})", field="model") from exc
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        raise ModelMismatch(f"{path}: format {meta.get('format')!r} version {meta.get('format_version')!r}; "
                            f"this tiledispatch reads {FORMAT!r} version {FORMAT_VERSION}")
    if meta.get("kind") not in KINDS:
        raise InvalidConfig(f"{path}: kind={meta.get('kind')!r}; legal values: {KINDS}", field="model")
    if not isinstance(meta.get("kernel_kinds"), list):
        raise InvalidConfig(f"{path}: kernel_kinds missing (the kernel kinds the model was trained on)",
                            field="model")
    return meta


def check_spec(meta: dict[str, Any], version: int | None, where: Any) -> None:
    """ModelMismatch unless the model's feature spec is version `version` (None: this tiledispatch's for the
    model's op; that version must also name exactly its features)."""
    spec = meta.get("feature_spec") or {}
    current = spec_version(meta["op"])
    version = current if version is None else version
    if spec.get("version") != version:
        raise ModelMismatch(f"the cost model in {where} uses {meta['op']} feature spec version "
                            f"{spec.get('version')!r}; expected {version}: retrain it with this tiledispatch")
    names = list(spec.get("names", []))
    if version == current and names != list(feature_names(meta["op"])):
        raise ModelMismatch(f"the cost model in {where} names other features than {meta['op']} spec version "
                            f"{current}: retrain it with this tiledispatch")
