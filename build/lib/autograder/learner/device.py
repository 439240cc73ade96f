"""The one place where the course decides which device tensors live on."""
import os

import torch

ENV_VAR = "COURSE_DEVICE"


def get_device() -> torch.device:
    """CUDA when available, else CPU; ``COURSE_DEVICE=cpu`` (or ``cuda:1``...) overrides."""
    wanted = os.environ.get(ENV_VAR, "").strip()
    if not wanted:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(wanted)
    except RuntimeError as err:
        raise ValueError(f"{ENV_VAR}={wanted!r} is not a device name such as 'cpu' or 'cuda'") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"{ENV_VAR}={wanted!r} asks for CUDA, but torch sees no CUDA device here")
    return device


def available_devices() -> list:
    """Every device type this machine can test on: CPU always, CUDA when present."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
