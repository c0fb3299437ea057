"""structlog set-up: JSON lines in production, a readable console format for people.

Everything the process logs goes out in the one format: structlog's own loggers, and the
standard library's (kopf's ``kopf.objects`` and ``kopf.activities``, asyncio, our own
``logging`` users) through a root handler that renders their records with the same processors.
An exception's traceback is a field of its line (``exception``), never lines of its own; with
JSON, so are uncaught exceptions (of the main thread and of other threads) and Python's
warnings. The console format writes tracebacks as Python prints them.

structlog formats tracebacks with rich when it can import it, and imports rich (about 40 ms,
with pygments) as it loads. The scheduler never uses rich (only the CEL library's command line
does), so this module, the first of the scheduler's start to import structlog, imports it while
rich cannot be imported, and rich stays importable afterwards.
"""

from __future__ import annotations

import logging
import sys
import threading
from types import TracebackType
from typing import Any, TextIO

if "structlog" in sys.modules or "rich" in sys.modules:
    import structlog
else:
    sys.modules["rich"] = None  # type: ignore[assignment]  # import rich: ImportError
    try:
        import structlog
    finally:
        del sys.modules["rich"]

__all__ = ["configure_logging", "json_lines", "stop_message"]

_state = {"json": False}


class _Handler(logging.StreamHandler[TextIO]):
    """The root handler this module installs (so a second set-up replaces it)."""


def _kopf_object(_: Any, __: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    """kopf's per-object records carry the object's reference: kept as ``object`` (kopf's own
    JSON key for it)."""
    record = event.get("_record")
    ref = getattr(record, "k8s_ref", None)
    if isinstance(ref, dict):
        event.setdefault("object", {k: v for k, v in ref.items() if v is not None})
    return event


def json_lines() -> bool:
    """Whether logging was set up to write JSON lines."""
    return _state["json"]


def stop_message(prog: str, message: str, stream: TextIO | None = None) -> None:
    """Say why the process stops: a log line when it writes JSON lines, else ``prog: message``
    on stderr."""
    if json_lines():
        structlog.get_logger(prog).error(message)
    else:
        print(f"{prog}: {message}", file=stream or sys.stderr)


def configure_logging(fmt: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    out = stream if stream is not None else sys.stderr
    lvl = getattr(logging, level.upper(), logging.INFO)
    json = fmt == "json"
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(
            colors=out.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    # The standard library's records: rendered as structlog's, with the logger's name.
    handler = _Handler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name, _kopf_object],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.StackInfoRenderer(),
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if not isinstance(h, _Handler)]
    root.addHandler(handler)
    root.setLevel(lvl)
    for noisy in ("kopf", "aiohttp", "kubernetes_asyncio"):
        logging.getLogger(noisy).setLevel(max(lvl, logging.WARNING))
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=True,
    )
    _state["json"] = json
    logging.captureWarnings(json)
    if json:
        sys.excepthook = _uncaught
        threading.excepthook = _uncaught_in_thread
    else:
        sys.excepthook = sys.__excepthook__
        threading.excepthook = threading.__excepthook__


def _uncaught(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
    logging.getLogger("gangsched").critical("uncaught exception", exc_info=(kind, error, tb))


def _uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("gangsched").critical(
        "uncaught exception in thread %s", name, exc_info=args.exc_value or False
    )
