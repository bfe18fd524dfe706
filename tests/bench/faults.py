"""Planted faults for the sweep isolation tests: `plant` is the sweep's worker setup hook (it runs inside the
spawned worker) and turns one named kernel into one that aborts the process and another into one that never
returns, and can make loading a batch's kernels slow. Kernels are chosen through the environment the worker
inherits."""
from __future__ import annotations

import os
import resource
import time

CRASH_ENV = "TD_TEST_CRASH_KERNEL"
HANG_ENV = "TD_TEST_HANG_KERNEL"
SLOW_LOAD_ENV = "TD_TEST_SLOW_LOAD_S"


def _abort(*args, **kwargs):
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))   # no core dump: the process dies at once
    os.abort()


def _hang(*args, **kwargs):
    time.sleep(3600)


def plant(kernels: dict) -> None:
    time.sleep(float(os.environ.get(SLOW_LOAD_ENV, "0")))   # a slow kernel load (the hook runs inside it)
    for env, fault in ((CRASH_ENV, _abort), (HANG_ENV, _hang)):
        kernel = kernels.get(os.environ.get(env, ""))
        if kernel is not None:
            kernel.launch = fault
