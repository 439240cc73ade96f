"""The one place where the course decides which device tensors live on."""
import functools
import os

import torch

ENV_VAR = "COURSE_DEVICE"


def get_device() -> torch.device:
    """CUDA when available, else CPU; ``COURSE_DEVICE=cpu`` (or ``cuda:1``...) overrides."""
    wanted = os.environ.get(ENV_VAR, "").strip()
    if not wanted:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        try:
            device = torch.device(wanted)
        except RuntimeError as err:
            raise ValueError(f"{ENV_VAR}={wanted!r} is not a device name such as 'cpu' or 'cuda'") from err
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"{ENV_VAR}={wanted!r} asks for CUDA, but torch sees no CUDA device here")
    if device.type == "cuda":
        bind_autograd_thread(device)
    return device


@functools.cache
def bind_autograd_thread(device: torch.device) -> None:
    """Autograd runs a CUDA backward in a thread of its own. Where that thread's first operation is a matrix
    product, cuBLAS finds no current CUDA context there and warns on stderr ("Attempting to run cuBLAS, but
    there was no current CUDA context!"), a red box in a learner's notebook (10's first backward does it).
    One elementwise backward first makes the device's primary context that thread's own."""
    x = torch.ones(1, device=device, requires_grad=True)
    (x * 2).sum().backward()


def available_devices() -> list:
    """Every device type this machine can test on: CPU always, CUDA when present."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
