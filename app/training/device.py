"""Where learners train: the `device` setting turned into a torch device."""

from __future__ import annotations

import torch


def resolve_device(name: str) -> torch.device:
    """`auto`: the first CUDA device when torch sees one, else the CPU; otherwise the
    named device, refused with a clear ValueError if torch does not know or have it."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ValueError(f"device {name!r} is not a torch device ({exc}); use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r}: torch sees no CUDA device here; use auto or cpu")
    return device
