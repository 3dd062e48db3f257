"""Keep the auth token out of every log line: `token=` values, `Bearer` values and JSON `"token"` fields become `***`.

uvicorn logs request paths with their query string (access lines, WebSocket accept
lines, and at debug the websockets handshake with its headers), and browsers can only
send the token as `?token=`. The redaction runs where each record is created (the
logging record factory), so it holds for every logger, every level and every handler,
including the handlers uvicorn's own logging setup (dictConfig) replaces at start-up.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"

_SECRETS = (
    # `token=...` (and `access_token=...`, `auth-token=...`) in a query string or a form
    re.compile(r"(\w*token=)[^&\s'\"#;,)\]}]+", re.IGNORECASE),
    # `Authorization: Bearer ...`, also inside a bytes header tuple
    re.compile(r"(\bbearer\s+)[^\s'\",;)\]}]+", re.IGNORECASE),
    # a `"token": "..."` field of a JSON body or a Python dict repr
    re.compile(r"""(["']\w*token["']\s*:\s*["'])(?:[^"'\\]|\\.)+""", re.IGNORECASE),
)


def redact(text: str) -> str:
    """`text` with the value of every token it holds replaced by `***`."""
    for pattern in _SECRETS:
        text = pattern.sub(rf"\g<1>{MASK}", text)
    return text


class _Redacted:
    """Stands in for a log argument whose str or repr held a token, so `%s` and `%r` both print it redacted."""

    def __init__(self, text: str, representation: str) -> None:
        self._text, self._repr = text, representation

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return self._repr


def _redact_arg(arg: Any) -> Any:
    if isinstance(arg, str):
        return redact(arg)
    if arg is None or isinstance(arg, (int, float)):
        return arg
    try:
        text, representation = str(arg), repr(arg)
    except Exception:  # an argument that cannot print itself is the handler's problem, as without redaction
        return arg
    clean_text, clean_repr = redact(text), redact(representation)
    if clean_text == text and clean_repr == representation:
        return arg
    return _Redacted(clean_text, clean_repr)


class RedactTokens(logging.Filter):
    """Rewrites a record in place (message, arguments, traceback) so that no token survives formatting; keeps every record."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.msg) if isinstance(record.msg, str) else _redact_arg(record.msg)
        if isinstance(record.args, Mapping):
            record.args = {key: _redact_arg(value) for key, value in record.args.items()}
        elif record.args:
            # Argument by argument: formatters such as uvicorn's AccessFormatter read record.args themselves.
            record.args = tuple(_redact_arg(arg) for arg in record.args)
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(self._formatter.formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_installed = False


def install_redaction() -> None:
    """Redact tokens from every log record created from now on, in this process; calling again does nothing."""
    global _installed
    if _installed:
        return
    make_record = logging.getLogRecordFactory()
    redactor = RedactTokens()

    def redacting_record_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        redactor.filter(record)
        return record

    logging.setLogRecordFactory(redacting_record_factory)
    _installed = True


def configure_logging(level: str) -> None:
    """The gateway's logging, in any process that runs part of it: one line per record
    (time, level, logger, message) at `level`, tokens redacted."""
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install_redaction()
