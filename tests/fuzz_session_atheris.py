"""atheris target: bytes in any split into a Session never raise, never give internal_error.

Run by tests/test_fuzz.py for a few seconds (`-max_total_time=5`); by hand, for longer:
    python tests/fuzz_session_atheris.py -max_total_time=600
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

with atheris.instrument_imports(include=["app"]):
    from app.sansio.protocol import FrameRejected, RequestReceived, Session, error_reply
    from app.settings.policies import PolicySet
    from app.spaces.models import BoxSpace, DiscreteSpace
    from rllink.errors import ErrorCode

SPACES = [
    PolicySet.single(BoxSpace(shape=(4,)), DiscreteSpace(n=2)),
    PolicySet.single(BoxSpace(shape=(3,)), BoxSpace(shape=(1,), low=-2.0, high=2.0)),
]


def test_one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    session = Session(SPACES[provider.ConsumeIntInRange(0, 1)], 4096, 8, 200)
    piece = provider.ConsumeIntInRange(1, 64)
    stream = provider.ConsumeBytes(provider.remaining_bytes())
    events = []
    for start in range(0, len(stream), piece):
        events += session.receive_data(stream[start : start + piece])
    for index, event in enumerate(events):
        if isinstance(event, FrameRejected):
            if event.error.code is ErrorCode.INTERNAL_ERROR:
                raise AssertionError(f"internal_error: {event.error.message}")
            session.reply(error_reply(event.error), event.encoding)
            if event.fatal and index != len(events) - 1:
                raise AssertionError("a fatal event that is not the last")
        elif not isinstance(event, RequestReceived):
            raise AssertionError(f"unexpected event {event!r}")


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
