"""The ``bash`` tool: ``bash -c`` in the workspace, isolated, confined, time-limited.

The command runs under the ``_sandbox_exec`` supervisor (``command_argv``) in a new session,
with a cleared environment (``child_environment``) plus the run's trace context, while its
pid is registered in ``kernel.process_traces``. What is enforced, and what this machine
cannot enforce (logged once at start, ``unenforced``), is in README.md, "Built-in tools and
the sandbox". On timeout or cancellation roost asks the supervisor to kill everything
(SIGTERM) and kills the whole process group if it does not finish within a grace.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import trio
from roost.kernel import (
    AgentLimits,
    SandboxError,
    Tool,
    ToolCall,
    ToolContext,
    ToolResult,
    TraceContext,
    child_open_file_limit,
)

from . import _landlock, _sandbox_exec, _seccomp
from ._sandbox import FileAccess, ToolsSettings, file_access, string_arg, tool_spec

log = logging.getLogger("roost.tools.bash")

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
PR_SET_DUMPABLE = 4
_READ_CHUNK = 65536
# After bash exits and its group is killed, how long to wait for the pipes to close.
_DRAIN_GRACE_S = 2.0
_STOP_GRACE_S = 2.0
_REAP_GRACE_S = 5.0
_PROBE_TIMEOUT_S = 10.0
# The probe runs roost's interpreter, no program from PATH (it runs without Landlock).
_PROBE_COMMAND = (
    "import os, sys; pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit()); "
    "sys.exit(0 if pids == [1, os.getpid()] else 'the new /proc shows other processes')"
)
_warned = False


@functools.cache
def _probe(netns: bool) -> str:
    """Why bash gets no PID (``netns``: and net) namespace here, or "": one real run each."""
    if not sys.platform.startswith("linux"):
        return f"not supported on {sys.platform}"
    if not netns and not _probe(True):
        return ""  # the network namespace came with a PID namespace: one run tells both
    flags = ["--pidns", "--netns"] if netns else ["--pidns"]
    command = [sys.executable, "-I", "-S", "-c", _PROBE_COMMAND]
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", _sandbox_exec.__file__, *flags, "--", *command],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the probe failed: {exc}"
    why = done.stderr.strip().removeprefix("roost sandbox: ").split("; refusing", 1)[0]
    return "" if done.returncode == 0 else why or f"exit {done.returncode}"


def namespaces_status() -> tuple[bool, str]:
    """Whether bash can run in its own PID namespace here, and why not."""
    return not _probe(False), _probe(False)


def network_namespace_status() -> tuple[bool, str]:
    """Whether bash can also get a network namespace of its own here, and why not."""
    return not _probe(True), _probe(True)


def protect_process() -> bool:
    """Make this process non-dumpable: processes of the same user (a child of bash among
    them) can then neither ptrace it nor read its memory or ``/proc/<pid>/environ``."""
    return sys.platform.startswith("linux") and _sandbox_exec._prctl(PR_SET_DUMPABLE, 0)


def unenforced() -> list[str]:
    """What bash's isolation cannot enforce on this machine, in words."""
    missing = _landlock.landlock_status().missing()
    ok, why = namespaces_status()
    if not ok:
        missing.append(
            f"a PID namespace for bash ({why}): bash sees other processes in /proc (their "
            "environment and memory stay closed: roost is non-dumpable), and its $TMPDIR "
            "is a directory on roost's disk with no size cap"
        )
        why = "it needs bash's PID namespace (or user namespace)"
    elif not network_namespace_status()[0]:
        missing.append(
            f"a network namespace for bash ({network_namespace_status()[1]}): without "
            "granted ports bash shares the host's network (UDP included; TCP refused by "
            "Landlock)"
        )
    if ok and os.geteuid() == 0 and not _sandbox_exec.PER_NAMESPACE_PID_MAX:
        why = (
            "roost runs as root, whom RLIMIT_NPROC does not bind, and Linux < 6.14 has no "
            "per-namespace pid_max"
        )
    if why:
        missing.append(f"a cap on the processes of one bash command ({why})")
    if not _seccomp.available():
        missing.append(
            f"bash's socket filter (no seccomp filter for {os.uname().machine}): non-TCP "
            "stream protocols such as MPTCP pass Landlock's TCP rules"
        )
    return missing


def warn_if_unconfined() -> None:
    """Log, once per process, everything this machine cannot enforce for bash."""
    global _warned
    if _warned:
        return
    _warned = True
    status = _landlock.landlock_status()
    if not status.available:
        log.warning(
            "Landlock unavailable: bash file access is NOT confined by the kernel, only the "
            "file tools' checks apply (%s)",
            status.reason,
        )
    for what in unenforced():
        log.warning("NOT enforced on this machine: %s", what)


def child_environment(
    workspace: Path, allowlist: tuple[str, ...] | list[str], temp: Path | None = None
) -> dict[str, str]:
    """The environment a child process gets: PATH, HOME, TMPDIR, LANG and allowlisted names."""
    env = {
        "PATH": os.environ.get("PATH") or DEFAULT_PATH,
        "HOME": str(workspace),
        "LANG": os.environ.get("LANG") or "C.UTF-8",
    }
    if temp is not None:
        env["TMPDIR"] = str(temp)
    for name in allowlist:
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def command_argv(
    command: str,
    access: FileAccess,
    *,
    connect: tuple[int, ...] = (),
    bind: tuple[int, ...] = (),
    limits: AgentLimits | None = None,
) -> list[str]:
    """The argv running ``command`` in bash under the ``_sandbox_exec`` supervisor."""
    # The system's bash (os.defpath: /bin:/usr/bin) before the first on roost's PATH, where
    # a directory an agent can write would put its own bash under every agent's commands.
    bash = shutil.which("bash", path=os.defpath) or shutil.which("bash") or "/bin/bash"
    argv = [sys.executable, "-I", "-S", _sandbox_exec.__file__, "--parent", str(os.getpid())]
    confined = access.mode != "rwx"
    limits = limits or AgentLimits()
    if namespaces_status()[0]:
        argv.append("--pidns")
        # With no granted port bash needs no network: its own namespace reaches nothing here.
        if confined and not connect and not bind and network_namespace_status()[0]:
            argv.append("--netns")
        argv += ["--tmp", str(access.temp), str(limits.bash_tmp_mb)]
    argv += ["--memory", str(limits.bash_memory_mb), "--processes", str(limits.bash_processes)]
    nofile = child_open_file_limit()
    if nofile is not None:  # roost raised its own: the command gets the operator's back
        argv += ["--nofile", str(nofile)]
    if confined and _seccomp.available():
        argv.append("--sockets")
    if _landlock.landlock_status().available:
        argv.append("--landlock")
        argv += access.landlock_args()
        if access.mode != "rwx":
            argv.append("--tcp")
            for flag, ports in (("--connect", connect), ("--bind", bind)):
                for port in ports:
                    argv += [flag, str(port)]
    else:
        warn_if_unconfined()
    return argv + ["--", bash, "-c", command]


class _Capture:
    """Keeps the first ``limit`` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.total = 0

    async def drain(self, stream: trio.abc.ReceiveStream) -> None:
        while chunk := await stream.receive_some(_READ_CHUNK):
            self.total += len(chunk)
            room = self.limit - len(self.data)
            if room > 0:
                self.data += chunk[:room]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


async def _stop(process: trio.Process) -> None:
    """Ask the supervisor to kill and reap the command's processes; force it after a grace."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with trio.move_on_after(_STOP_GRACE_S):
            await process.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with trio.move_on_after(_REAP_GRACE_S):
        await process.wait()


def _split_budget(out: str, err: str, limit: int) -> tuple[str, str, bool]:
    """Cut stdout and stderr to ``limit`` characters together; the unused share is lent."""
    if len(out) + len(err) <= limit:
        return out, err, False
    half = limit // 2
    if len(err) <= half:
        return out[: limit - len(err)], err, True
    if len(out) <= half:
        return out, err[: limit - len(out)], True
    return out[:half], err[: limit - half], True


async def run_command(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    max_chars: int,
    track: Callable[[int], Callable[[], None]] | None = None,
) -> dict:
    """Run ``argv`` in a new process group, killed on exit, timeout or cancellation; ``track(pid)``
    registers it, and what that returns is called once all the process started is gone."""
    # Bytes kept per stream: enough for ``max_chars`` characters of UTF-8.
    stdout, stderr = _Capture(max_chars * 4), _Capture(max_chars * 4)
    timed_out = False
    release: Callable[[], None] | None = None
    process = await trio.lowlevel.open_process(
        argv,
        cwd=str(cwd),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        if track is not None:
            release = track(process.pid)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stdout.drain, process.stdout)
            nursery.start_soon(stderr.drain, process.stderr)
            with trio.move_on_after(timeout_s) as deadline:
                await process.wait()
            timed_out = deadline.cancelled_caught
            await _stop(process)
            # One escaped by setsid() could hold the pipes open, so the drains have a deadline.
            nursery.cancel_scope.deadline = trio.current_time() + _DRAIN_GRACE_S
        drained = not nursery.cancel_scope.cancelled_caught
    finally:
        try:
            with trio.CancelScope(shield=True):
                await _stop(process)
                for stream in (process.stdout, process.stderr):
                    if stream is not None:
                        await stream.aclose()
        finally:
            if release is not None:
                release()
    out, err = stdout.text(), stderr.text()
    out, err, cut = _split_budget(out, err, max_chars)
    truncated = cut or stdout.total > len(stdout.data) or stderr.total > len(stderr.data)
    return {
        "exit_code": process.returncode,
        "stdout": out,
        "stderr": err,
        "timed_out": timed_out,
        "truncated": truncated,
        "output_complete": drained,
    }


def format_output(run: dict, timeout_s: float) -> str:
    parts = []
    if run["stdout"]:
        parts.append(run["stdout"].rstrip("\n"))
    if run["stderr"]:
        parts.append("[stderr]\n" + run["stderr"].rstrip("\n"))
    if run["truncated"]:
        parts.append("[output truncated]")
    if not run["output_complete"]:
        parts.append("[some output was not collected: a process left the group and kept the pipe]")
    if run["timed_out"]:
        parts.append(
            f"[timed out after {timeout_s:g} s; the command and its children were killed — "
            "pass a larger timeout or run less at once]"
        )
    code = run["exit_code"]
    if code == _sandbox_exec.SANDBOX_EXIT_CODE and "roost sandbox:" in run["stderr"]:
        parts.append("[the sandbox could not be set up; the command did not run]")
    parts.append(f"[exit code: {code}]")
    return "\n".join(parts)


BASH_OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "exit_code": {"type": ["integer", "null"]},
        "timed_out": {"type": "boolean"},
        "truncated": {"type": "boolean"},
    },
    "required": ["exit_code", "timed_out", "truncated"],
}


def bash_tool(settings: ToolsSettings) -> Tool:
    """The ``bash`` tool descriptor for ``settings``."""
    max_timeout = settings.bash_timeout_s
    spec = tool_spec(
        name="bash",
        title="Run a shell command",
        description=(
            "Run a command with `bash -c` in the agent's workspace and return its output "
            f"(stdout, then stderr; at most {settings.bash_max_output_chars} characters) and "
            "exit code. The environment is minimal (PATH, HOME=workspace, TMPDIR, LANG and "
            "allowed variables); in sandbox mode files can only be written in the workspace "
            "and $TMPDIR, and there is no network unless the agent's manifest allows ports. "
            "Each call is a fresh shell: `cd`, variables and files in $TMPDIR (private to "
            "the call) do not persist; keep files in the workspace. "
            f"Times out after {max_timeout:g} s at most; background processes are killed "
            "when the command ends."
        ),
        properties={
            "command": string_arg("The shell command line to run, e.g. `ls -la && git status`."),
            "timeout": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": max_timeout,
                "description": (
                    f"Seconds before the command is killed (default and maximum {max_timeout:g})."
                ),
            },
        },
        required=["command"],
        output_schema=BASH_OUTPUT_SCHEMA,
        readOnlyHint=False,
        destructiveHint=True,
        idempotentHint=False,
        openWorldHint=True,
        # Longer than bash's own limit, so the command's timeout fires first and reports.
        timeout_s=max_timeout + _STOP_GRACE_S + _REAP_GRACE_S + _DRAIN_GRACE_S + 3,
    )

    async def bash(call: ToolCall, ctx: ToolContext) -> ToolResult:
        command = call.arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            return ToolResult.error("arguments.command: expected a non-empty shell command string")
        timeout = call.arguments.get("timeout", max_timeout)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            return ToolResult.error(
                f"arguments.timeout: expected a positive number of seconds, got {timeout!r}"
            )
        timeout = float(min(timeout, max_timeout))  # min first: float(10**400) overflows
        access = file_access(ctx)
        workspace = access.workspace
        if not workspace.is_dir():
            raise SandboxError(
                f"the workspace {workspace} of agent {ctx.agent!r} does not exist; create it "
                'or fix "workspace" in its agent.json'
            )
        kernel = ctx.kernel
        manifest = kernel.agents.get(ctx.agent) if kernel is not None else None
        network = getattr(manifest, "network", None)
        allowlist = tuple(dict.fromkeys((*settings.env_allowlist, *ctx.env_allowlist)))
        env = child_environment(workspace, allowlist, access.temp)
        if _landlock.landlock_status().available:
            env["PATH"] = access.bash_path(env["PATH"]) or DEFAULT_PATH
        # The run's trace context (TRACEPARENT, ROOST_TRACE_*), for a client in the command to
        # forward; the daemon also knows it by the pid.
        trace = ctx.trace or TraceContext.new(ctx.agent)
        env.update(trace.to_env())
        processes = kernel.process_traces if kernel is not None else None
        run = await run_command(
            command_argv(
                command,
                access,
                connect=tuple(getattr(network, "connect", ())),
                bind=tuple(getattr(network, "bind", ())),
                limits=getattr(manifest, "limits", None),
            ),
            cwd=workspace,
            env=env,
            timeout_s=timeout,
            max_chars=min(settings.bash_max_output_chars, ctx.max_output_chars),
            track=None if processes is None else partial(processes.register, trace=trace),
        )
        return ToolResult(
            content=({"type": "text", "text": format_output(run, timeout)},),
            structured_content={k: run[k] for k in BASH_OUTPUT_SCHEMA["required"]},
            is_error=run["timed_out"],
        )

    return Tool(spec=spec, handler=bash)
