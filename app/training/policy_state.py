"""One published policy version as a value: its ONNX bytes and its SET_STATE payload.

Light (no torch, no onnx): the policy store, self-play, serving and REST hold these, and
only the learners build them (onnx_export.py).
"""

from __future__ import annotations

import base64
import gzip
from dataclasses import dataclass

GZIP_LEVEL = 1  # float weights barely compress: level 9 saves <0.5 % and is slower


@dataclass(frozen=True)
class PolicyState:
    """One published policy version, exported once and served to every client as is."""

    weights_seq_no: int
    onnx_bytes: bytes  # the policy: REST, model files, thin clients, snapshots
    onnx_gzip_b64: str  # SET_STATE's `onnx_file`: the same model, or a gSDE actor's exploring one
    exploring_onnx_bytes: bytes | None = None  # a gSDE actor's exploring model: what thin clients' exploring steps play


def set_state_payload(onnx_bytes: bytes) -> str:
    """SET_STATE's `onnx_file`: base64 of the gzip-compressed ONNX bytes."""
    return base64.b64encode(gzip.compress(onnx_bytes, compresslevel=GZIP_LEVEL)).decode("ascii")
