"""Preset names given on the command line: checked when the options are parsed, before any work, with a
one-line error that names the closest packaged presets instead of all of them."""
from __future__ import annotations

import difflib

from tiledispatch.errors import BadInput

CLOSEST = 3   # how many near names an unknown preset's error suggests


def unknown_preset(name: str, flag: str = "preset", default: bool = False) -> BadInput:
    """The error for a preset name that is not packaged: the closest names, and where to see them all.
    `default`: the name was derived from the problem's options, not given."""
    from tiledispatch.presets import list_presets

    names = list_presets()
    close = difflib.get_close_matches(name, names, n=CLOSEST, cutoff=0.6)
    hint = f"closest: {', '.join(close)}" if close else "no close match"
    what = (f"no preset is packaged for these options (default --{flag} {name})" if default
            else f"{flag}={name!r} is not a packaged preset")
    return BadInput(f"{what}; {hint} (`tiledispatch list` shows all {len(names)})", field=flag)


def check_preset(name: str, flag: str = "preset", default: bool = False) -> str:
    """`name` when it is a packaged preset, else the error of unknown_preset."""
    from tiledispatch.presets import list_presets

    if name not in list_presets():
        raise unknown_preset(name, flag, default)
    return name


def preset_option(value: str | None) -> str | None:
    """typer callback of --preset options: check the name when the command line is parsed."""
    return None if value is None else check_preset(value)


def preselected_option(value: str | None) -> str | None:
    """typer callback of --preselected options."""
    return None if value is None else check_preset(value, "preselected")
