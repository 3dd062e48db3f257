"""The published policy versions: the current one, and the last few kept for download."""

from __future__ import annotations

from collections import OrderedDict

from app.training.onnx_export import PolicyState

KEPT_VERSIONS = 10  # recent policy versions kept for download (GET /api/model.onnx?version=)


class PolicyStore:
    """Each version is exported once (ONNX, gzip, base64) and served from here."""

    def __init__(self) -> None:
        self._current: PolicyState | None = None
        self._kept: OrderedDict[int, PolicyState] = OrderedDict()

    def publish(self, state: PolicyState) -> None:
        """Make `state` the current version and keep it for download."""
        self._current = state
        self._kept[state.weights_seq_no] = state
        while len(self._kept) > KEPT_VERSIONS:
            self._kept.popitem(last=False)

    @property
    def current(self) -> PolicyState:
        """The latest published version."""
        if self._current is None:
            raise RuntimeError("no policy version is published yet (TrainingService.start() has not run)")
        return self._current

    def kept(self, weights_seq_no: int) -> PolicyState | None:
        """One of the last KEPT_VERSIONS versions, or None if it is not kept."""
        return self._kept.get(weights_seq_no)

    @property
    def kept_versions(self) -> list[int]:
        return list(self._kept)
