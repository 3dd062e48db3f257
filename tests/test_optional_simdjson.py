"""Without pysimdjson the gateway still reads every body, with orjson, and says so once."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from .gateway_process import ROOT
from .helpers import chunk, frame

# In a Python where `import simdjson` fails: the same large episodes body through the
# session, twice, then what it made of them.
SCRIPT = textwrap.dedent(
    """
    import json, logging, sys
    sys.modules["simdjson"] = None  # import simdjson now raises ImportError
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from app.settings.policies import PolicySet
    from app.sansio.protocol import Session
    from app.spaces.models import CARTPOLE_ACTION_SPACE, CARTPOLE_OBSERVATION_SPACE
    session = Session(PolicySet.single(CARTPOLE_OBSERVATION_SPACE, CARTPOLE_ACTION_SPACE), 1 << 24)
    body = sys.stdin.buffer.read()
    events = session.receive_data(body + body)
    print(json.dumps([[c.obs.tolist() for c in e.request.episodes] for e in events]))
    """
)


def test_without_simdjson_bodies_decode_the_same_and_the_log_says_so_once():
    # One chunk: several would take app.sansio.chunk_columns' path, which needs no simdjson.
    message = frame({"type": "EPISODES", "episodes": [chunk(250, seed=1)]})
    assert len(message) > 4096  # large enough for the simdjson path when it exists
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], input=message, cwd=ROOT, capture_output=True, timeout=120, check=True
    )
    decoded = json.loads(done.stdout)
    sent = json.loads(message[8:])["episodes"]
    expected = [[list(map(float, row)) for row in c["obs"]] for c in sent]
    assert len(decoded) == 2
    for episodes in decoded:
        assert [[[round(x, 6) for x in row] for row in obs] for obs in episodes] == [
            [[round(x, 6) for x in row] for row in obs] for obs in expected
        ]
    warnings = [line for line in done.stderr.decode().splitlines() if "simdjson" in line]
    assert len(warnings) == 1 and "orjson" in warnings[0], done.stderr.decode()
