"""Speedups, the run summary (with issue 35's acceptance checks), the markdown tables, writing and merging
of the result files of benchmarks/models.py; `models_section(path)` renders a result file for BENCHMARKS.md
(tables.py)."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

ACCEPT_EVERY = 1.00          # converted >= stock on every model, eager and compiled (training step)
ACCEPT_X3D_COMPILED = 1.5    # X3D-M under reduce-overhead
ACCEPT_GROUP_GEOMEAN = 1.05  # over the 2-D depthwise / grouped models
ACCEPT_LAYER_ERR = 1e-2      # per-layer y / dx / dw vs fp32
GROUP = "2d-dw-grouped"
VARIANTS = ("stock", "converted")
AA = "stock_again"   # --aa: a second stock copy timed in the same rounds as stock and converted
MODES = ("eager", "compiled")


def _ratio(num: Any, den: Any) -> float | None:
    return num / den if num and den else None


def _geomean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def speedups(row: dict[str, Any]) -> dict[str, Any]:
    """Per phase: stock / converted wall (synchronized steps), back-to-back and GPU time, eager and compiled,
    and compiled vs eager (stock)."""
    out: dict[str, Any] = {}
    for phase, runs in row.get("runs", {}).items():
        def get(key: str, field: str, runs: dict = runs) -> Any:
            return runs.get(key, {}).get(field)
        fields = (("wall", "wall_ms"), ("gpu", "gpu_ms"), ("back_to_back", "pipelined_ms"))
        out[phase] = {f"{mode}_{what}": _ratio(get(f"stock_{mode}", field), get(f"converted_{mode}", field))
                      for mode in ("eager", "compiled") for what, field in fields}
        for variant in ("stock", "converted"):
            out[phase][f"{variant}_compiled_vs_eager"] = _ratio(get(f"{variant}_eager", "wall_ms"),
                                                                get(f"{variant}_compiled", "wall_ms"))
        for mode in MODES:   # A/A: stock / a second stock copy (1.00 but for noise)
            if f"{AA}_{mode}" in runs:
                for what, field in fields:
                    out[phase][f"{mode}_aa_{what}"] = _ratio(get(f"stock_{mode}", field),
                                                             get(f"{AA}_{mode}", field))
    return out


def _worst_layer(row: dict[str, Any]) -> float | None:
    worst = row.get("numerics", {}).get("per_layer", {}).get("worst", {})
    values = [v for v in worst.values() if v is not None]
    return max(values) if values else None


def summary(models: list[dict[str, Any]], loss: dict[str, Any] | None = None) -> dict[str, Any]:
    """Geomeans and minima of the speedups per phase and mode, failures, and the acceptance checks (with the
    loss comparison's verdict when the run made one)."""
    out: dict[str, Any] = {"failures": [f"{m['model']}: {_failure(m)}" for m in models if _failure(m)]}
    if loss and "error" in loss:
        out["failures"].append(f"loss comparison ({loss.get('model')}): {loss['error'][:160]}")
    for phase in ("train", "infer"):
        for mode in ("eager", "compiled"):
            key = f"{mode}_wall"
            pairs = [(m["model"], m.get("speedups", {}).get(phase, {}).get(key)) for m in models]
            pairs = [(name, v) for name, v in pairs if v]
            if not pairs:
                continue
            low = min(pairs, key=lambda p: p[1])
            group = [m.get("speedups", {}).get(phase, {}).get(key) for m in models if m.get("group") == GROUP]
            b2b = [m.get("speedups", {}).get(phase, {}).get(f"{mode}_back_to_back") for m in models]
            b2b_group = [m.get("speedups", {}).get(phase, {}).get(f"{mode}_back_to_back") for m in models
                         if m.get("group") == GROUP]
            out[f"{phase}_{mode}"] = {"models": len(pairs), "geomean": _geomean([v for _, v in pairs]),
                                      "min": low[1], "min_model": low[0], "group_geomean": _geomean(group),
                                      "back_to_back_geomean": _geomean(b2b),
                                      "back_to_back_group_geomean": _geomean(b2b_group)}
            aa = [v for m in models if (v := m.get("speedups", {}).get(phase, {}).get(f"{mode}_aa_wall"))]
            if aa:
                out[f"{phase}_{mode}"]["aa_wall_range"] = [min(aa), max(aa)]
    x3d = next((m for m in models if m["model"] == "x3d_m"), {})
    train = {m["model"]: m.get("speedups", {}).get("train", {}) for m in models}
    worst = [_worst_layer(m) for m in models]
    out["acceptance"] = {
        "every_model_eager_ge_1": _all(v.get("eager_wall") for v in train.values()),
        "every_model_compiled_ge_1": _all(v.get("compiled_wall") for v in train.values()),
        "every_model_compiled_ge_1_back_to_back": _all(v.get("compiled_back_to_back")
                                                       for v in train.values()),
        "x3d_compiled": x3d.get("speedups", {}).get("train", {}).get("compiled_wall"),
        "group_geomean_eager": out.get("train_eager", {}).get("group_geomean"),
        "group_geomean_compiled": out.get("train_compiled", {}).get("group_geomean"),
        "group_geomean_compiled_back_to_back":
            out.get("train_compiled", {}).get("back_to_back_group_geomean"),
        "worst_layer_rel_err": max((w for w in worst if w is not None), default=None),
        "loss_matches_stock": loss.get("pass") if loss else None,
        "targets": {"every": ACCEPT_EVERY, "x3d_compiled": ACCEPT_X3D_COMPILED,
                    "group_geomean": ACCEPT_GROUP_GEOMEAN, "layer_rel_err": ACCEPT_LAYER_ERR},
    }
    return out


def _all(values: Any) -> bool | None:
    """False when a measured speedup misses the target, None when none does but one is missing (a model
    failed or was not measured: no verdict), True otherwise."""
    vals = list(values)
    if any(v is not None and v < ACCEPT_EVERY for v in vals):
        return False
    return None if not vals or any(v is None for v in vals) else True


def _failure(m: dict[str, Any]) -> str:
    if "error" in m:
        return m["error"][:160]
    if "skipped" in m:
        return "skipped: " + m["skipped"]
    bad = [f"{phase} {key}: {r.get('error', 'skipped: ' + r.get('skipped', ''))[:160]}"
           for phase, runs in m.get("runs", {}).items() for key, r in runs.items()
           if "error" in r or "skipped" in r]
    bad += [f"{v}: {e['error'][:160]}" for v, e in m.get("errors", {}).items()]
    if "error" in m.get("numerics", {}):
        bad.append("numerics: " + m["numerics"]["error"][:160])
    return "; ".join(bad)


# -- markdown -----------------------------------------------------------------------------------------------
def _f(value: Any, spec: str = ".2f") -> str:
    return "–" if value is None else f"{value:{spec}}"


def _cell(runs: dict[str, Any], key: str) -> str:
    r = runs.get(key, {})
    if "error" in r:
        return "error"
    if "wall_ms" not in r:
        return "–"
    mark = " †" if r.get("graph_breaks") or r.get("cudagraph_skips") else ""
    return f"{r['wall_ms']:.1f} ({_f(r.get('gpu_ms'), '.1f')}){mark}"


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


PHASE_HEAD = ["model", "input", "layers td / torch", "stock eager", "converted eager", "GPU, vendor off",
              "speedup (GPU)", "stock compiled", "converted compiled", "speedup (GPU)",
              "stock compiled vs eager"]
NOVENDOR = "converted_novendor_eager"   # --vendor-off-gpu: converted eager, vendor plans off (GPU ms)
BREAKDOWN_HEAD = ["model", "variant", "GPU ms", "conv/GEMM share", "conv/GEMM: tiledispatch",
                  "conv/GEMM: vendor", "norm", "elementwise", "reduction", "layout copies", "other"]
BREAKDOWN_KEYS = ("tiledispatch", "vendor_conv_gemm", "norm", "elementwise", "reduction", "layout_copy",
                  "other")
NUMERICS_HEAD = ["model", "output: stock / converted vs fp32", "first-conv dw: stock / converted vs fp32",
                 "layers", "worst converted y / dx / dw", "worst stock y / dx / dw", "over limit"]


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    """A markdown table; none (no lines) without rows."""
    return [_row(head), _row(["---"] * len(head)), *(_row(r) for r in rows)] if rows else []


def _phase_table(data: dict[str, Any], phase: str) -> list[str]:
    rows = []
    for m in data["models"]:
        runs, sp = m.get("runs", {}).get(phase, {}), m.get("speedups", {}).get(phase, {})
        layers = m.get("layers", {})
        rows.append([m["model"], "x".join(map(str, m.get("input_shape", []))),
                     f"{layers.get('taken', '–')} / {layers.get('left', '–')}",
                     _cell(runs, "stock_eager"), _cell(runs, "converted_eager"), _novendor(runs),
                     f"{_f(sp.get('eager_wall'))}× ({_f(sp.get('eager_gpu'))}×)",
                     _cell(runs, "stock_compiled"), _cell(runs, "converted_compiled"),
                     f"{_f(sp.get('compiled_wall'))}× ({_f(sp.get('compiled_gpu'))}×)",
                     f"{_f(sp.get('stock_compiled_vs_eager'))}×"])
    return _table(PHASE_HEAD, rows)


def _aa_table(data: dict[str, Any]) -> list[str]:
    """Per model and phase, the A/A wall (GPU) ratio of each mode next to the speedup (--aa)."""
    rows = []
    for m in data["models"]:
        for phase, sp in m.get("speedups", {}).items():
            if any(f"{mode}_aa_wall" in sp for mode in MODES):
                rows.append([m["model"], phase, *(cell for mode in MODES for cell in (
                    f"{_f(sp.get(f'{mode}_aa_wall'))}× ({_f(sp.get(f'{mode}_aa_gpu'))}×)",
                    f"{_f(sp.get(f'{mode}_wall'))}× ({_f(sp.get(f'{mode}_gpu'))}×)",
                    f"{_f(sp.get(f'{mode}_aa_back_to_back'))}× / {_f(sp.get(f'{mode}_back_to_back'))}×"))])
    return _table(["model", "phase", "eager A/A", "eager speedup", "eager back-to-back A/A / speedup",
                   "compiled A/A", "compiled speedup", "compiled back-to-back A/A / speedup"], rows)


def _novendor(runs: dict[str, Any]) -> str:
    r = runs.get(NOVENDOR, {})
    return "error" if "error" in r else _f(r.get("gpu_ms"), ".1f")


def _breakdown_table(data: dict[str, Any]) -> list[str]:
    rows = []
    for m in data["models"]:
        for key in ("stock_eager", "converted_eager", NOVENDOR, "stock_compiled", "converted_compiled"):
            r = m.get("runs", {}).get("train", {}).get(key, {})
            if r.get("by_class_ms"):
                share = _ratio(r.get("conv_gemm_ms"), r.get("gpu_ms"))
                rows.append([m["model"], key, _f(r.get("gpu_ms"), ".1f"),
                             "–" if share is None else f"{100 * share:.0f}%",
                             *(_f(r["by_class_ms"].get(k), ".1f") for k in BREAKDOWN_KEYS)])
    return _table(BREAKDOWN_HEAD, rows)


def _errs(values: dict[str, Any]) -> str:
    return " / ".join(_f(values.get(k), ".1e") for k in ("y", "dx", "dw"))


def _numerics_table(data: dict[str, Any]) -> list[str]:
    rows = []
    for m in data["models"]:
        n = m.get("numerics", {})
        if not n or "error" in n:
            continue
        e, p = n.get("end_to_end", {}), n.get("per_layer", {})
        s, c = e.get("stock_vs_ref", {}), e.get("converted_vs_ref", {})
        rows.append([m["model"], f"{_f(s.get('output'), '.1e')} / {_f(c.get('output'), '.1e')}",
                     f"{_f(s.get('first_conv_dw'), '.1e')} / {_f(c.get('first_conv_dw'), '.1e')}",
                     p.get("layers", "–"), _errs(p.get("worst", {})), _errs(p.get("worst_stock", {})),
                     len(p.get("over_limit", []))])
    return _table(NUMERICS_HEAD, rows)


def _header(data: dict[str, Any]) -> str:
    s = data.get("settings", {})
    names = ("torch", "timm", "torchvision", "tiledispatch", "triton", "cuda", "cudnn")
    versions = ", ".join(f"{name} {data.get(name)}" for name in names)
    return (f"{data.get('gpu')}, {versions}, {data.get('date')}. {s.get('dtype')} channels-last, batch "
            f"{s.get('batch')} (video {s.get('video_batch')}); wall = median of {s.get('steps')} "
            f"synchronized steps after warm-up; GPU = summed kernel time per step (torch.profiler, "
            f"{s.get('profile_steps')} steps); compiled = torch.compile(mode={s.get('compile_mode')!r}). "
            "Cells: wall ms (GPU ms); GPU, vendor off = GPU ms of a converted copy on our kernels only "
            "(--vendor-off-gpu: TILEDISPATCH_VENDOR=0, no StepCheck); speedup = stock / converted; † = "
            "compiled with graph breaks or graphs run without CUDA graphs (counts in the JSON).")


def _acceptance(acc: dict[str, Any]) -> str:
    return (f"Acceptance (training step): every model converted ≥ stock eager: "
            f"{acc.get('every_model_eager_ge_1')}, compiled: {acc.get('every_model_compiled_ge_1')} "
            f"(back-to-back {acc.get('every_model_compiled_ge_1_back_to_back')}); X3D-M "
            f"compiled {_f(acc.get('x3d_compiled'))}× (target {ACCEPT_X3D_COMPILED}); 2-D depthwise / "
            f"grouped geomean eager {_f(acc.get('group_geomean_eager'), '.3f')}×, compiled "
            f"{_f(acc.get('group_geomean_compiled'), '.3f')}× (back-to-back "
            f"{_f(acc.get('group_geomean_compiled_back_to_back'), '.3f')}×; target {ACCEPT_GROUP_GEOMEAN}); "
            f"worst "
            f"per-layer rel. err {_f(acc.get('worst_layer_rel_err'), '.1e')} (limit {ACCEPT_LAYER_ERR:g}); "
            f"loss comparison: {acc.get('loss_matches_stock')}.")


def _loss_lines(loss: dict[str, Any]) -> list[str]:
    """The loss comparison: setup, then first / last / final loss and step-wise gaps per curve."""
    title = f"**Loss over training steps: {loss.get('model')}, stock vs converted**"
    if "error" in loss:
        return [title, "", f"Failed: {loss['error'][:300]}"]
    gaps = loss.get("max_abs_diff", {})
    head = ["curve", "first", "last", f"final (mean of last {loss.get('window')})", "max abs Δ per step"]
    rows = [[name, *(_f(loss[key][name], ".4f") for key in ("first", "last", "final")),
             _f(gaps.get(gap), ".4f") if gap else "–"]
            for name, gap in (("stock", "stock_vs_fp32"), ("converted", "converted_vs_stock"), ("fp32", None))
            if name in loss.get("first", {})]
    shape = "x".join(map(str, loss.get("input_shape", [])))
    setup = (f"{loss.get('source')}, input {shape}, {loss.get('steps')} steps of {loss.get('optimizer')} "
             f"over {loss.get('batches')} fixed random batches and labels, from the same initial weights; "
             f"{loss.get('precision')}. Max abs Δ: stock vs the fp32 curve, converted vs stock.")
    verdict = "pass" if loss.get("pass") else "**miss**"
    return [title, "", setup, "", *_table(head, rows), "",
            f"Converted's final loss minus stock's: {_f(loss.get('final_gap'), '+.4f')} (limit "
            f"{loss.get('tolerance')} x stock's first loss): {verdict}."]


def markdown(data: dict[str, Any]) -> str:
    """Every table of one result file (tables without rows left out)."""
    summ = data.get("summary", {})
    lines = [_header(data), ""]
    titles = (("train", "Training step (forward + backward, optimizer excluded)"), ("infer", "Inference"))
    for phase, title in titles:
        if any(phase in m.get("runs", {}) for m in data["models"]):
            lines += [f"**{title}**", "", *_phase_table(data, phase), ""]
    aa = _aa_table(data)
    if aa:
        lines += ["**A/A: stock / a second stock copy, timed in the same rounds (1.00× but for noise)**", "",
                  *aa, ""]
    sections = (("Where a training step's GPU time goes (ms per step, by kernel class; share = conv/GEMM "
                 "kernels of the GPU time)", _breakdown_table(data)),
                ("Numerics (rel. error, norm-wise, vs fp32 with TF32 off)", _numerics_table(data)))
    for title, table in sections:
        lines += [f"**{title}**", "", *table, ""] if table else []
    if data.get("loss"):
        lines += [*_loss_lines(data["loss"]), ""]
    if summ.get("acceptance") and data["models"]:
        lines += [_acceptance(summ["acceptance"]), ""]
    lines += [f"Failed or skipped: {f}" for f in summ.get("failures", [])]
    return "\n".join(lines).rstrip() + "\n"


INTRO = ("Training step (forward + backward, optimizer excluded) and inference of public model "
         "definitions (timm / torchvision, no weights) and the project's X3D-M "
         "(`src/tiledispatch/testing/x3d.py`), stock vs `tiledispatch.nn.convert`ed, eager and under "
         "`torch.compile(mode=\"reduce-overhead\")`, in one process (`benchmarks/models.py`): wall and GPU "
         "time per step, the GPU time by kernel class, layers taken / left on torch, numerics against fp32, "
         "and (`--loss-steps`) the loss curves of stock and converted copies trained side by side.")


def models_section(path: Path) -> str:
    """The BENCHMARKS.md section of one result file (benchmarks/tables.py): what the benchmark is, the file's
    `notes`, then its tables."""
    data = json.loads(path.read_text())
    notes = [f"Note: {note}" for note in data.get("notes", [])]
    return "\n\n".join([f"## Models: stock vs converted ({path.name})", INTRO, *notes, markdown(data)])


# -- result files -------------------------------------------------------------------------------------------
def merge(paths: list[Path], out: Path) -> dict[str, Any]:
    """One result file from several runs on one GPU: per model and phase, the stock and converted pair of each
    mode comes from the first file that measured both (so each speedup is from one run); the numerics and the
    layers from the first file that has them, and so the loss comparison."""
    datas = [json.loads(p.read_text()) for p in paths]
    if len({d["gpu"] for d in datas}) > 1:
        raise SystemExit(f"--merge: files from different GPUs: {sorted({d['gpu'] for d in datas})}")
    merged = {**datas[0], "models": [], "merged_from": [{"path": str(p), "date": d["date"], "argv": d["argv"]}
                                                         for p, d in zip(paths, datas)]}
    rows: dict[str, dict[str, Any]] = {}
    for data in datas:
        for model in data["models"]:
            row = rows.setdefault(model["model"], copy.deepcopy(model))
            for phase, runs in model.get("runs", {}).items():
                have = row.setdefault("runs", {}).setdefault(phase, {})
                for mode in MODES:   # stock and converted of a mode: both from the same file
                    pair = [f"{variant}_{mode}" for variant in VARIANTS]
                    if (all("wall_ms" in runs.get(k, {}) for k in pair)
                            and not all("wall_ms" in have.get(k, {}) for k in pair)):
                        have.update({k: runs[k] for k in pair})
                        if f"{AA}_{mode}" in runs:   # the A/A control of that same run
                            have[f"{AA}_{mode}"] = runs[f"{AA}_{mode}"]
                if "wall_ms" in runs.get(NOVENDOR, {}) and "wall_ms" not in have.get(NOVENDOR, {}):
                    have[NOVENDOR] = runs[NOVENDOR]
            for field in ("numerics", "layers", "source", "input_shape", "num_classes", "params_m"):
                mine = row.get(field)
                if field in model and (mine is None or (isinstance(mine, dict) and "error" in mine)):
                    row[field] = model[field]
    for row in rows.values():
        if row.get("runs"):
            row.pop("skipped", None)   # a model skipped in one run and measured in another
        row["speedups"] = speedups(row)
    merged["models"] = list(rows.values())
    losses = [d["loss"] for d in datas if "loss" in d]
    if losses:
        merged["loss"] = next((loss for loss in losses if "error" not in loss), losses[0])
    write(merged, out)
    return merged


def write(data: dict[str, Any], out: Path) -> None:
    data["summary"] = summary(data["models"], data.get("loss"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(data))
