"""``--log-format json``: every line the process writes is a JSON object, kopf's records and
exception tracebacks included."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

import gangsched.logging as glog
from gangsched.cli_kube import _run_async
from gangsched.logging import configure_logging, stop_message

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """configure_logging sets process-wide state: put it back after each test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {n: logging.getLogger(n).level for n in ("kopf", "aiohttp", "kubernetes_asyncio")}
    config = structlog.get_config()
    hooks = sys.excepthook, threading.excepthook
    state = dict(glog._state)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, lvl in levels.items():
        logging.getLogger(name).setLevel(lvl)
    structlog.configure(**config)
    sys.excepthook, threading.excepthook = hooks
    glog._state.update(state)
    logging.captureWarnings(False)


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    text = out.getvalue()
    assert text.endswith("\n")
    lines = text.splitlines()
    parsed = []
    for line in lines:
        doc = json.loads(line)  # every line, or the test fails here naming it
        assert isinstance(doc, dict), line
        parsed.append(doc)
    return parsed


def test_kopfs_records_and_their_tracebacks_are_json_lines() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    kopf_log = logging.getLogger("kopf.objects")
    try:
        raise ValueError("boom\nover two lines")
    except ValueError:
        kopf_log.exception(
            "Handler 'group_event' failed with an exception. Will ignore.",
            extra={"k8s_skip": True, "k8s_ref": {"name": "g", "namespace": "ml", "uid": None}},
        )
    logging.getLogger("kopf.activities.startup").warning("Startup %s took %ds", "probe", 3)
    logging.getLogger("asyncio").error("Task exception was never retrieved\nfuture: <Task>")
    structlog.get_logger("gangsched.test").info("plain structlog", n=1)
    lines = _lines(out)
    assert len(lines) == 4
    failed, startup, loop, own = lines
    assert failed["event"] == "Handler 'group_event' failed with an exception. Will ignore."
    assert (failed["logger"], failed["level"]) == ("kopf.objects", "error")
    assert failed["object"] == {"name": "g", "namespace": "ml"}
    assert failed["exception"].startswith("Traceback (most recent call last):")
    assert failed["exception"].rstrip().endswith("ValueError: boom\nover two lines")
    assert "timestamp" in failed
    assert (startup["event"], startup["level"]) == ("Startup probe took 3s", "warning")
    assert loop["event"] == "Task exception was never retrieved\nfuture: <Task>"
    assert (own["event"], own["n"], own["level"]) == ("plain structlog", 1, "info")


def test_kopf_info_records_are_left_out_below_warning() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    logging.getLogger("kopf.objects").info("Handler succeeded.")
    logging.getLogger("gangsched.statuscontroller").info("stdlib info")
    [line] = _lines(out)
    assert line["event"] == "stdlib info"


def test_a_second_setup_replaces_the_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("json", "info", stream=first)
    configure_logging("json", "info", stream=second)
    logging.getLogger("kopf.objects").error("once")
    assert first.getvalue() == ""
    assert [d["event"] for d in _lines(second)] == ["once"]


def test_warnings_are_json_lines() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("deprecated thing", DeprecationWarning, stacklevel=1)
    [line] = _lines(out)
    assert line["logger"] == "py.warnings" and "deprecated thing" in line["event"]


def test_an_uncaught_exception_in_a_thread_is_a_json_line() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)

    def fail() -> None:
        raise RuntimeError("thread broke")

    # pytest's own thread-exception hook is put back by the fixture; call ours directly.
    thread = threading.Thread(target=fail, name="worker")
    try:
        fail()
    except RuntimeError as e:
        threading.excepthook(threading.ExceptHookArgs((RuntimeError, e, e.__traceback__, thread)))
    [line] = _lines(out)
    assert line["event"] == "uncaught exception in thread worker"
    assert line["level"] == "critical"
    assert "RuntimeError: thread broke" in line["exception"]


def test_a_stop_reported_by_the_command_is_a_json_line() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)

    async def refused() -> None:
        raise ConnectionRefusedError("refused")

    assert _run_async(refused(), "gangsched run") == 2
    [line] = _lines(out)
    assert line["event"] == "cannot connect: refused" and line["level"] == "error"


def test_without_json_a_stop_is_one_plain_line() -> None:
    configure_logging("console", "info", stream=io.StringIO())
    err = io.StringIO()
    stop_message("gangsched run", "lost the leader lease", stream=err)
    assert err.getvalue() == "gangsched run: lost the leader lease\n"
    assert sys.excepthook is sys.__excepthook__


def test_the_whole_process_writes_json_lines_to_the_end() -> None:
    """In a process of its own: kopf's loggers, a traceback, a thread's uncaught exception and
    the main thread's, each one JSON line on stderr."""
    script = textwrap.dedent(
        """
        import logging, threading
        from gangsched.logging import configure_logging
        configure_logging("json", "info")
        try:
            {}["missing"]
        except KeyError:
            logging.getLogger("kopf.objects").exception("handler failed")
        t = threading.Thread(target=lambda: 1 / 0, name="t1")
        t.start()
        t.join()
        raise OSError("the end")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,  # this checkout's package first on the path
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [d["event"] for d in lines] == [
        "handler failed",
        "uncaught exception in thread t1",
        "uncaught exception",
    ]
    assert "KeyError: 'missing'" in lines[0]["exception"]
    assert "ZeroDivisionError" in lines[1]["exception"]
    assert "OSError: the end" in lines[2]["exception"]


def test_the_schedulers_start_does_not_import_rich() -> None:
    """rich (structlog's optional traceback formatter) costs the start about 40 ms and the
    scheduler never uses it: imported in the order ``gangsched run`` imports them, the
    scheduler's modules leave it out, and it can still be imported afterwards."""
    script = textwrap.dedent(
        """
        import sys
        import gangsched.cli, gangsched.cli_kube, gangsched.boot, gangsched.logging
        import gangsched.settings, gangsched.app, gangsched.kube.service
        print("rich" in sys.modules)
        import rich.console
        print(rich.console.Console is not None)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == ["False", "True"]


def test_the_console_format_writes_a_plain_traceback() -> None:
    out = io.StringIO()
    configure_logging("console", "info", stream=out)
    try:
        {}["missing"]
    except KeyError:
        structlog.get_logger("t").exception("failed")
    text = out.getvalue()
    assert "failed" in text
    assert "Traceback (most recent call last):" in text
    assert "KeyError: 'missing'" in text
