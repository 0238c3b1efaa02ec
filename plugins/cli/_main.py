"""Argument parsing and error reporting for ``roost``: only the standard library at
start-up (``roost --help`` stays fast); each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from functools import partial
from typing import Any, TextIO

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130

_EPILOG = """\
examples:
  roost run                       serve the API on http://127.0.0.1:8470
  roost send coder "hello"        ask an agent (through a running daemon, else in-process)
  roost watch --kinds AGENT:,EXEC:  follow events of a running daemon
  roost validate agents/*/agent.json

configuration: --config FILE, else $ROOST_CONFIG, else ./roost.toml, else defaults.
"""


def _number(kind: type, low: int, high: int, why: str) -> Any:
    """An argparse ``type``: an int from ``low`` in ASCII digits, or a float above ``low`` in
    ASCII, at most ``high``; else an error saying ``why``, quoting the text as typed."""

    def parse(text: str) -> Any:
        from roost.kernel import InvalidInput, number_setting, parse_int  # when given only

        with contextlib.suppress(InvalidInput, ValueError):
            if kind is int:
                return parse_int(text, "", low, high)
            if text.isascii() and (value := number_setting(float(text), low, high)) is not None:
                return value
        raise argparse.ArgumentTypeError(f"{why}, got {text}")

    return parse


_port = _number(int, 0, 65535, "port must be from 0 to 65535 (0 picks a free port)")
_positive_float = _number(float, 0, 3600, "expected seconds between 0 and 3600")
_positive_int = _number(int, 1, 10**9, "expected a whole number from 1 to 1000000000")


def build_parser() -> argparse.ArgumentParser:
    """The ``roost`` argument parser (global options work before or after the command)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="roost.toml to use (default: $ROOST_CONFIG, else ./roost.toml)",
    )
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show tracebacks and debug logs",
    )
    parser = argparse.ArgumentParser(
        prog="roost",
        description="roost: a Trio microkernel hosting AI agents that talk MCP and A2A.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    command = partial(sub.add_parser, parents=[common])

    run = command("run", help="boot the kernel and serve the HTTP API")
    run.add_argument("--host", help="address to listen on (default: http.host, 127.0.0.1)")
    run.add_argument(
        "--port", type=_port, help="port to listen on (default: http.port, 8470; 0 = any free port)"
    )
    command("demo", help="run the built-in demo (agents collaborating, then the breaker)")
    agents = command("agents", help="list the agents")
    agents.add_argument("--json", action="store_true", help="print JSON instead of a table")

    tools = command("tools", help="list the tools (all, or those an agent may call)")
    tools.add_argument("--agent", metavar="NAME", help="only the tools this agent may call")
    tools.add_argument("--json", action="store_true", help="print JSON instead of a table")

    send = command("send", help="send a message to an agent and print its reply")
    send.add_argument("agent", metavar="AGENT", help="the agent's name (see: roost agents)")
    send.add_argument("message", metavar="MESSAGE", help="the text to send")
    send.add_argument(
        "--session", metavar="ID", help="continue this session (printed after each reply)"
    )
    send.add_argument(
        "--timeout", type=_positive_float, metavar="SECONDS", help="give up after this long"
    )
    send.add_argument("--json", action="store_true", help="print the whole reply as JSON")

    chat = command("chat", help="chat with an agent in the terminal, replies streamed")
    chat.add_argument("agent", metavar="AGENT", help="the agent's name (see: roost agents)")
    chat.add_argument("--session", metavar="ID", help="continue this session")

    watch = command("watch", help="print a running daemon's events as they happen")
    watch.add_argument(
        "--kinds",
        nargs="+",
        metavar="KIND",
        default=[],
        help=(
            "only these kinds: exact (AGENT:REPLY) or a namespace (EXEC:); "
            "space- or comma-separated"
        ),
    )
    watch.add_argument("--count", type=_positive_int, metavar="N", help="exit after N events")
    watch.add_argument("--json", action="store_true", help="print each event as a JSON line")

    validate = command("validate", help="check agent.json manifests")
    validate.add_argument(
        "files", nargs="+", metavar="FILE", help="agent.json files or directories of them"
    )

    a2a = command("a2a", help="talk to A2A agents (any A2A server)")
    a2a_command = partial(
        a2a.add_subparsers(dest="a2a_command", metavar="ACTION", required=True).add_parser,
        parents=[common],
    )
    a2a_discover = a2a_command("discover", help="read an agent's card")
    a2a_discover.add_argument("url", metavar="URL", help="the agent's base URL or card URL")
    a2a_discover.add_argument("--json", action="store_true", help="print the whole card as JSON")
    a2a_send = a2a_command("send", help="send a message to an A2A agent")
    a2a_send.add_argument("url", metavar="URL", help="the agent's base URL or card URL")
    a2a_send.add_argument("message", metavar="MESSAGE", help="the text to send")
    a2a_send.add_argument("--stream", action="store_true", help="print events as they arrive")
    a2a_send.add_argument("--context", metavar="ID", help="continue this context")
    a2a_send.add_argument("--task", metavar="ID", help="answer this task (input-required)")
    a2a_send.add_argument("--json", action="store_true", help="print JSON")

    mcp = command(
        "mcp", help="serve MCP on stdin/stdout (bridges to a running daemon, else boots the kernel)"
    )
    mcp.add_argument("--no-daemon", action="store_true", help="always boot an in-process kernel")
    command("version", help="print the version")
    return parser


def _log_uncaught(log: Any) -> None:
    """What Python itself would print to stderr, an exception it can only report ("Exception
    ignored in": a ``__del__`` raising) and one that ends a thread, logged (so redacted)."""
    import threading

    def shown(item: Any) -> str:
        try:
            return repr(item)[:200]
        except Exception:
            return f"<{type(item).__name__}>"

    def unraisable(report: Any) -> None:
        said = report.err_msg or "Exception ignored in"
        caught = (report.exc_type, report.exc_value, report.exc_traceback)
        log.error("%s: %s", said, shown(report.object), exc_info=caught if caught[0] else None)

    def thread_failed(report: Any) -> None:
        if report.exc_type is SystemExit:  # as Python's own hook: a thread's way to end
            return
        name = report.thread.name if report.thread is not None else "?"
        caught = (report.exc_type, report.exc_value, report.exc_traceback)
        log.error("Exception in thread %s", name, exc_info=caught)

    sys.unraisablehook = unraisable
    threading.excepthook = thread_failed


def _setup_logging(debug: bool, command: str) -> None:
    """Log to stderr, every credential roost reads (``redact_from_logs``) taken out; Python's
    warnings, ignored exceptions and threads' failures are logged, so they are redacted too."""
    import logging

    from roost.kernel import RedactingStreamHandler

    handler = RedactingStreamHandler(sys.stderr, "%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, handlers=[handler])
    logging.captureWarnings(True)
    _log_uncaught(logging.getLogger("roost"))
    if command == "run" and not debug:
        logging.getLogger("roost").setLevel(logging.INFO)
        logging.getLogger("roost.http.server").setLevel(logging.WARNING)
        logging.getLogger("roost.http.access").setLevel(logging.WARNING)


def _load_config(args: argparse.Namespace) -> Any:
    from roost.kernel import load_config

    return load_config(getattr(args, "config", None))


def _kinds(values: Sequence[str]) -> list[str]:
    return [k.strip() for v in values for k in v.split(",") if k.strip()]


def dispatch(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run the parsed command; returns the exit code (errors propagate)."""
    command = args.command
    if command == "version":
        import platform

        from roost.kernel import roost_version

        print(f"roost {roost_version()} (Python {platform.python_version()})", file=out)
        return 0
    if command == "validate":
        from ._commands import validate_command

        return validate_command(args.files, out=out, err=err)

    import trio

    if command == "a2a":
        from roost.plugins.a2a._cli import a2a_command

        return trio.run(partial(a2a_command, args, out=out, err=err))

    if command == "mcp":  # before importing the other commands: an MCP client is waiting
        from roost.plugins.mcp._stdio_server import isolate_stdout, run_stdio

        protocol_fd = isolate_stdout()  # before anything else can write to stdout
        config = _load_config(args)
        return trio.run(
            partial(run_stdio, config, stdout_fd=protocol_fd, prefer_daemon=not args.no_daemon)
        )

    from . import _commands as c

    config = _load_config(args)
    io = {"out": out, "err": err}
    if command == "run":
        call = partial(c.run_command, host=args.host, port=args.port, own_process=True, **io)
    elif command == "demo":
        call = partial(c.run_demo, out=out)
    elif command == "agents":
        call = partial(c.agents_command, as_json=args.json, **io)
    elif command == "tools":
        call = partial(c.tools_command, agent=args.agent, as_json=args.json, **io)
    elif command == "chat":
        from ._chat import chat_command

        call = partial(chat_command, agent=args.agent, session_id=args.session, **io)
    elif command == "send":
        call = partial(
            c.send_command,
            agent=args.agent,
            message=args.message,
            session_id=args.session,
            timeout=args.timeout,
            as_json=args.json,
            **io,
        )
    elif command == "watch":
        kinds = _kinds(args.kinds)
        call = partial(c.watch_command, kinds=kinds, as_json=args.json, count=args.count, **io)
    else:  # pragma: no cover
        raise AssertionError(f"unhandled command {command!r}")
    return trio.run(partial(call, config))


def _leaf(exc: BaseException) -> BaseException:
    """The error that matters inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        inner = [e for e in exc.exceptions if type(e).__name__ != "Cancelled"]
        exc = (inner or list(exc.exceptions))[0]
    return exc


def describe_error(exc: BaseException) -> str:
    """One line for the user (RoostError, ConfigError, connection and OS errors keep their text)."""
    from roost.kernel import RoostError

    if isinstance(exc, (RoostError, ConnectionError, OSError)):
        return str(exc) or type(exc).__name__
    return f"unexpected {type(exc).__name__}: {exc} (run again with --debug for the traceback)"


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """The ``roost`` console script; returns the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    debug = bool(getattr(args, "debug", False))
    _setup_logging(debug, args.command)
    try:
        return dispatch(args, out, err)
    except KeyboardInterrupt:
        print("interrupted", file=err)
        return EXIT_INTERRUPTED
    except Exception as exc:  # ExceptionGroup included
        said = _traceback(exc) if debug else f"roost: error: {describe_error(_leaf(exc))}\n"
    except BaseExceptionGroup as group:  # e.g. KeyboardInterrupt inside a nursery
        if not debug and isinstance(_leaf(group), KeyboardInterrupt):
            print("interrupted", file=err)
            return EXIT_INTERRUPTED
        said = _traceback(group)
    from roost.kernel import redact_for_log

    err.write(redact_for_log(said))  # an error may quote a credential, as the log may
    return EXIT_ERROR


def _traceback(exc: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(exc))
