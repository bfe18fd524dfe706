"""Making registries from command-line sources: presets, config files, single kernels; building them."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.configs.naming import parse_name
from tiledispatch.errors import BadInput, CompileError, InvalidConfig
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.registry.registry import BuildReport, Registry

CONFIG_FORMATS = ("a codegen manifest.json (or its directory)", "a registry JSON {'arch', 'kernels'}",
                  "a JSON list of instance names or config dicts", "a preset-style {'configs': [...]}")


def read_config_file(path: str | Path) -> Any:
    path = Path(path)
    if path.is_dir():
        path = path / "manifest.json"
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise BadInput(f"--config {path}: cannot read it ({exc.strerror or exc})", field="config") from exc
    except ValueError as exc:
        raise InvalidConfig(f"--config {path}: not valid JSON ({exc})", field="config") from exc


def _add_items(registry: Registry, items: list[Any], path: str | Path) -> None:
    for i, item in enumerate(items):
        if isinstance(item, str):
            registry.add(parse_name(item))
        elif isinstance(item, dict):
            registry.add((ConvConfig if item.get("op") == "conv" else GemmConfig).from_dict(item))
        else:
            raise InvalidConfig(f"--config {path}: item {i} is a {type(item).__name__}; expected an instance "
                                "name or a config dict", field="config")


def registry_from_file(path: str | Path, gpu_target: str | None = None) -> Registry:
    """A registry holding the instances of a config file, in any of CONFIG_FORMATS."""
    data = read_config_file(path)
    if isinstance(data, dict) and "instances" in data:           # codegen manifest: build its source files
        registry = Registry(gpu_target or data.get("arch"))
        registry.add_codegen_output(path)
        return registry
    if isinstance(data, dict) and "kernels" in data:             # Registry.to_json()
        if gpu_target is None:
            return Registry.from_json(json.dumps(data))
        registry = Registry(gpu_target)
        _add_items(registry, _as_list(data["kernels"], path), path)
        return registry
    if isinstance(data, dict) and "configs" in data:             # preset-style file
        registry = Registry(gpu_target or data.get("arch"))
        _add_items(registry, _as_list(data["configs"], path), path)
        return registry
    if isinstance(data, list):
        registry = Registry(gpu_target)
        _add_items(registry, data, path)
        return registry
    raise InvalidConfig(f"--config {path}: unrecognised JSON; expected {'; or '.join(CONFIG_FORMATS)}",
                        field="config")


def _as_list(value: Any, path: str | Path) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidConfig(f"--config {path}: expected a list of kernels, got {type(value).__name__}",
                            field="config")
    return value


Problem = GemmProblem | ConvProblem


def _epilogue(problem: Problem | None) -> Any:
    if problem is None:
        return None
    if isinstance(problem, ConvProblem):
        return problem.activation, problem.bias
    return problem.epilogue


def registry_from_preset(name: str, gpu_target: str | None = None,
                         problem: Problem | None = None) -> Registry:
    """A registry of a packaged preset, specialised to the problem's epilogue when one is given."""
    registry = Registry(gpu_target)
    registry.add_preset(name, _epilogue(problem))
    return registry


def problem_and_registry(make_problem: Callable[[Any], Problem], *, preset: str | None,
                         config: str | None, kernel: str | None, gpu_target: str | None
                         ) -> tuple[Problem, Registry]:
    """The problem and the registry select/run/profile use: one --kernel, a --config file, or a preset
    (default: the essential one of the problem's dtype and layout, specialised to its epilogue, with the key's
    full space declared on demand where td.gemm / td.conv* rank it: dispatch/space.py).

    `make_problem(base)` builds the problem from the command line; options left unset default to `base`, the
    --kernel's config or the first instance of the --config file or --preset.
    """
    sources = (("--kernel", kernel), ("--config", config), ("--preset", preset))
    given = [flag for flag, value in sources if value]
    if len(given) > 1:
        raise BadInput(f"{' and '.join(given)} cannot be combined; give one source of kernels",
                       field=given[0][2:])
    if kernel:
        registry = Registry(gpu_target)
        registry.add(parse_name(kernel))
        return make_problem(registry.kernels[0].config), registry
    if config:
        registry = registry_from_file(config, gpu_target)
        return make_problem(registry.kernels[0].config if len(registry) else None), registry
    from tiledispatch.cli.problem_args import default_preset
    from tiledispatch.presets import load_preset

    problem = make_problem(load_preset(preset)[0] if preset else None)
    if preset:
        return problem, registry_from_preset(preset, gpu_target, problem)
    from tiledispatch.dispatch.space import declare_space

    name = default_preset(problem)
    registry = registry_from_preset(name, gpu_target, problem)
    declare_space(registry, name, problem, _epilogue(problem))   # as td.gemm / td.conv*: auto ranks it
    return problem, registry


def prepared(make_problem: Callable[[Any], Problem], *, preset: str | None, config: str | None,
             kernel: str | None, gpu_target: str | None, jobs: int | None, quiet: bool
             ) -> tuple[Problem, Registry]:
    """problem_and_registry, then build_for_use: what select, run and profile start with."""
    problem, registry = problem_and_registry(make_problem, preset=preset, config=config, kernel=kernel,
                                             gpu_target=gpu_target)
    build_for_use(registry, jobs, quiet)
    return problem, registry


def build(registry: Registry, workers: int | None = None, quiet: bool = False) -> BuildReport:
    """Build (or load from the cache) every instance; a one-line summary goes to stderr."""
    from tiledispatch.cli.output import note

    if len(registry) == 0:
        raise InvalidConfig("no kernel to build: the source holds no instance valid for "
                            f"{registry.arch.name}", field="config")
    if workers is not None and workers < 1:
        raise BadInput(f"-j {workers} must be >= 1", field="jobs")
    report = registry.build(max_workers=workers)
    if not quiet:
        note(f"kernels for {registry.arch.name}: {report}")
    if registry.skipped and not quiet:
        note(f"skipped {len(registry.skipped)} preset config(s) invalid on {registry.arch.name}")
    return report


def build_for_use(registry: Registry, workers: int | None = None, quiet: bool = False) -> BuildReport:
    """Build for select/run/profile: failures are reported, and fatal only when nothing was built."""
    from tiledispatch.cli.output import note

    report = build(registry, workers, quiet)
    for name, reason in report.failed.items():
        note(f"warning: {name} failed to build: {_first_line(reason)}")
    if not report.built and not report.cached and not report.from_bundle:
        raise CompileError(f"none of the {len(registry)} kernels built; first failure: "
                           f"{_first_line(next(iter(report.failed.values()), 'unknown'))}", field="build")
    return report


def _first_line(text: str) -> str:
    lines = [line for line in str(text).splitlines() if line.strip()]
    return lines[0][:300] if lines else ""
