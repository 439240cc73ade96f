"""Triton for notebook 09: compiled where the course runs on CUDA, Triton's interpreter elsewhere.

Why one place: the interpreter is chosen by `TRITON_INTERPRET=1`, which Triton reads when
`@triton.jit` decorates a kernel (3.9): set before `import triton`, it holds for every kernel.
`prepare()` is the first thing the notebook (and its checks) call; it sets the variable where the
course's device is not CUDA and says what the kernels will run on. Triton has wheels for Linux
(x86_64, aarch64) only: elsewhere `prepare()` says so and the notebook skips the launches.
"""
import dataclasses
import importlib.util
import os
import platform
import re
import sys
import warnings

import numpy
import torch

from autograder.learner.device import get_device

INTERPRET = "TRITON_INTERPRET"
WHEELS = {("Linux", "x86_64"), ("Linux", "aarch64")}  # where `pip install triton` finds a wheel


@dataclasses.dataclass(frozen=True)
class Triton:
    """What `prepare` found. `usable`: kernels can be launched here (otherwise skip them);
    `interpreted`: they run in Triton's interpreter on the CPU (same results, no speed)."""

    usable: bool
    interpreted: bool
    message: str

    @property
    def mode(self) -> str:
        return "compiled" if self.usable and not self.interpreted else "interpreted" if self.usable else "unavailable"


def _on(value) -> bool:
    return str(value).strip().lower() in ("1", "true", "on", "yes")


def prepare(device=None) -> Triton:
    """Get Triton ready for kernels on `device` (default: the course's, `COURSE_DEVICE` or CUDA when
    present): without CUDA, set `TRITON_INTERPRET=1` before `triton` is imported. Call it first."""
    device = torch.device(device) if device is not None else get_device()
    imported_before = sys.modules.get("triton") is not None
    if device.type != "cuda" and not _on(os.environ.get(INTERPRET, "")):
        os.environ[INTERPRET] = "1"
        if imported_before:
            warnings.warn("triton was imported before TRITON_INTERPRET=1 was set: a kernel decorated before now "
                          "cannot run here ('0 active drivers'). Restart the kernel and call "
                          "`triton_setup.prepare()` before anything imports triton.", RuntimeWarning, stacklevel=2)
    interpreted = _on(os.environ.get(INTERPRET, ""))
    if importlib.util.find_spec("triton") is None:
        return Triton(False, interpreted, _missing())
    try:
        import triton
    except Exception as err:  # a broken install must not take the notebook down: its launches are skipped
        return Triton(False, interpreted, f"triton is installed but cannot be imported ({err!r}): "
                                          "the kernels' launches are skipped")
    # torch 2.10 and 2.11 pin triton 3.6, whose interpreter turns a kernel's integer argument into a Python
    # int with int() of a 1-element array: NumPy 2.4 refuses that (a loop over `range(0, n, BLOCK)` raises)
    if interpreted and _version(triton.__version__) < (3, 7) and _version(numpy.__version__) >= (2, 4):
        return Triton(False, True, f"Triton {triton.__version__}'s interpreter fails with NumPy {numpy.__version__} "
                                   "(a kernel's integer argument used as a number raises 'only 0-dimensional "
                                   "arrays can be converted to Python scalars'): `pip install 'numpy<2.4'` (or "
                                   "'triton>=3.7' with a torch that allows it), then restart the kernel")
    if interpreted:
        why = "no CUDA here" if device.type != "cuda" else "TRITON_INTERPRET=1 was set"
        return Triton(True, True, f"Triton {triton.__version__} runs the kernels in its interpreter on the CPU "
                                  f"({why}): the same results as on a GPU, no speed, and no fault on an "
                                  "out-of-bounds access")
    name = f" ({torch.cuda.get_device_name(device)})" if torch.cuda.is_available() else ""
    return Triton(True, False, f"Triton {triton.__version__} compiles the kernels for {device}{name}")


def _version(text: str) -> tuple:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def _missing() -> str:
    where = (platform.system(), platform.machine())
    if where not in WHEELS:
        return (f"Triton has no wheel for {where[0]} {where[1]} (only Linux x86_64 and aarch64): the kernels "
                "are shown but not launched here; run this notebook on Colab or Linux to launch them")
    return "Triton is not installed: `pip install triton` (Linux), then restart the kernel"
