"""OpenTelemetry export for roost (the optional ``otel`` extra: ``pip install 'roost[otel]'``).

With ``[telemetry]`` in roost.toml the plugin runs the ``otel`` service (``roost_services``):
every span the kernel finishes (agent runs, model calls, tool calls, MCP and A2A server
hops) goes to an OTLP/HTTP collector with roost's own trace, span and parent ids, so a trace
that an OpenTelemetry-instrumented caller started continues through roost and into the next
daemon. Without the table this module imports nothing of OpenTelemetry, runs nothing, and no
span is recorded on its account.
"""

from __future__ import annotations

from typing import Any

from roost.kernel import KernelAPI, ServiceDescriptor, hookimpl

from ._settings import INSTALL_HINT, TelemetrySettings, check

__all__ = [
    "INSTALL_HINT",
    "TelemetrySettings",
    "roost_check_config",
    "roost_services",
]


@hookimpl
def roost_check_config(config: Any) -> None:
    check(config)  # a bad [telemetry], or one without the extra installed, stops the boot


@hookimpl
def roost_services(kernel: KernelAPI) -> list[ServiceDescriptor]:
    settings = TelemetrySettings.from_config(getattr(kernel.config, "telemetry", None))
    if not settings.enabled:
        return []
    from ._export import SpanExport

    return [ServiceDescriptor("otel", SpanExport(settings).run, start_timeout_s=10.0)]
