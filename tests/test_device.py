import pytest
import torch

from autograder.learner.device import get_device


def test_default_is_cuda_when_available_else_cpu(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    assert get_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_environment_variable_overrides(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")


def test_cuda_requested_without_cuda_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="asks for CUDA, but torch sees no CUDA device"):
        get_device()


def test_nonsense_device_name_is_named(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "gpu please")
    with pytest.raises(ValueError, match="'gpu please' is not a device name"):
        get_device()
