"""OpenTelemetry export for roost (the optional ``otel`` extra: ``pip install 'roost[otel]'``).

With ``[telemetry]`` in roost.toml the ``otel`` service sends every span the kernel finishes
to an OTLP/HTTP collector with roost's own ids, so a caller's trace continues through roost.
Without the table nothing of OpenTelemetry is imported or run, and no span recorded for it.
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
