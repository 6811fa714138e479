"""cli._not_an_interrupt_in_py4j: which of py4j's logged tracebacks reach the terminal."""

from __future__ import annotations

import logging
import sys

import py4j.clientserver
import pytest

from brokerscope import cli, report


def _record(exc: BaseException) -> logging.LogRecord:
    """The record py4j's clientserver logs for `exc` (logger.exception in its own file)."""
    try:
        raise exc
    except BaseException:
        info = sys.exc_info()
    return logging.LogRecord(
        "py4j.clientserver",
        logging.ERROR,
        py4j.clientserver.__file__,
        512,
        "Exception occurred while shutting down connection",
        None,
        info,
    )


def _during_interrupt() -> BaseException:
    """A socket error raised while an interrupted call is handled (py4j shutting its socket)."""
    try:
        try:
            raise report.Terminated()
        except KeyboardInterrupt:
            raise BrokenPipeError(32, "Broken pipe")  # noqa: B904 - the context is the point
    except BrokenPipeError as e:
        return e


@pytest.fixture
def stopping():
    report.STOPPING.set()
    yield
    report.STOPPING.clear()


def test_a_py4j_failure_outside_a_stop_is_shown():
    report.STOPPING.clear()
    assert cli._not_an_interrupt_in_py4j(_record(ConnectionResetError(104, "reset")))


def test_the_interrupted_call_and_what_it_raised_are_not_shown():
    report.STOPPING.clear()
    assert not cli._not_an_interrupt_in_py4j(_record(report.Terminated()))
    assert not cli._not_an_interrupt_in_py4j(_record(_during_interrupt()))


def test_any_py4j_failure_while_stopping_on_a_signal_is_not_shown(stopping):
    """The command stops on SIGTERM: a call of another thread (jobs cancelled as the JVM goes)
    fails without an interrupt in its chain; the one line `interrupted (SIGTERM)` says it."""
    assert not cli._not_an_interrupt_in_py4j(_record(ConnectionResetError(104, "reset")))


def test_records_of_other_modules_are_always_shown(stopping):
    rec = _record(ConnectionResetError(104, "reset"))
    rec.pathname = cli.__file__
    assert cli._not_an_interrupt_in_py4j(rec)


def test_a_traceback_py4j_logs_to_its_own_logger_is_filtered_too(capsys):
    """py4j.clientserver logs the broken pipe of the interrupted call's socket through its own
    logger, whose records the root logger's filters never see (found in CI: a SIGINT while
    decoding printed that traceback)."""
    report.STOPPING.clear()
    cli.quiet_py4j_interrupts()
    handler = logging.StreamHandler(sys.stderr)
    logging.getLogger().addHandler(handler)
    try:
        logging.getLogger("py4j.clientserver").handle(_record(_during_interrupt()))
        logging.getLogger("py4j.java_gateway").handle(_record(report.Terminated()))
        logging.getLogger("py4j.clientserver").handle(_record(ConnectionResetError(104, "reset")))
    finally:
        logging.getLogger().removeHandler(handler)
    err = capsys.readouterr().err
    assert err.count("Traceback") == 1 and "ConnectionResetError" in err and "BrokenPipe" not in err
