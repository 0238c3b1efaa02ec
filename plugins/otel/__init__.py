"""OpenTelemetry export for roost (the optional ``otel`` extra: ``pip install 'roost[otel]'``).

With ``[telemetry]`` in roost.toml the ``otel`` service sends every span the kernel finishes
to an OTLP/HTTP collector with roost's own ids, so a caller's trace continues through roost.
Without the table nothing of OpenTelemetry is imported or run, and no span recorded for it:
reading the settings imports none of it (``_export`` does, loaded only when enabled).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from typing import Any

import attrs
from roost.kernel import (
    ConfigError,
    KernelAPI,
    ServiceDescriptor,
    header_table,
    hookimpl,
    number_setting,
    unknown_key,
)

# What the exporter needs, by module (looked up without importing it).
_MODULES = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter")
INSTALL_HINT = "pip install 'roost[otel]'"


@attrs.frozen
class TelemetrySettings:
    """Where and how roost exports its spans over OTLP/HTTP (protobuf)."""

    enabled: bool = False
    endpoint: str = ""
    service_name: str = "roost"
    sampling: float = 1.0  # the share of traces exported, decided by trace id
    timeout_s: float = 5.0  # bounds each export, and the flush at shutdown
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)  # may carry credentials

    @classmethod
    def from_config(cls, raw: Any) -> TelemetrySettings:
        """Read ``config.telemetry``: off when the table is absent, on when it is there
        (unless ``enabled = false``). A bad value raises ConfigError naming the key."""
        if raw is None or (isinstance(raw, Mapping) and not raw):
            return cls()
        if not isinstance(raw, Mapping):
            raise ConfigError(
                f"telemetry: expected a table ([telemetry] in roost.toml), got {type(raw).__name__}"
            )
        keys = [field.name for field in attrs.fields(cls)]
        if unknown := sorted(set(raw) - set(keys)):
            raise unknown_key("telemetry", str(unknown[0]), keys, "[telemetry]")
        enabled = raw.get("enabled", True)
        if not isinstance(enabled, bool):
            raise ConfigError(f"telemetry.enabled: expected true or false, got {enabled!r}")
        endpoint = raw.get("endpoint", None if enabled else "")
        is_url = isinstance(endpoint, str) and re.match(r"^https?://[^/\s]+(/\S*)?$", endpoint)
        if (enabled or endpoint) and not is_url:
            raise ConfigError(
                "telemetry.endpoint: expected the OTLP/HTTP traces URL of a collector, e.g. "
                f"'http://127.0.0.1:4318/v1/traces', got {endpoint!r}"
            )
        service = raw.get("service_name", "roost")
        if not isinstance(service, str) or not service.strip():
            raise ConfigError(
                f"telemetry.service_name: expected a non-empty string, got {service!r}"
            )
        sampling = _number(raw, "sampling", 1.0, 0.0, 1.0, "a ratio from 0 to 1 (1: every trace)")
        timeout = _number(raw, "timeout_s", 5.0, 0.1, 300.0, "seconds from 0.1 to 300")
        headers = header_table(raw.get("headers", {}), "telemetry.headers")
        return cls(enabled, endpoint, service.strip(), sampling, timeout, headers)


def _number(
    raw: Mapping[str, Any], key: str, default: float, low: float, high: float, what: str
) -> float:
    value = raw.get(key, default)
    checked = number_setting(value, low, high, closed=True)
    if checked is None:
        raise ConfigError(f"telemetry.{key}: expected {what}, got {value!r}")
    return checked


def missing_extra() -> str | None:
    """The first module of the ``otel`` extra that is not installed, or None."""
    for name in _MODULES:
        try:
            found = importlib.util.find_spec(name)
        except ModuleNotFoundError:  # a parent package is missing
            found = None
        if found is None:
            return name
    return None


@hookimpl
def roost_check_config(config: Any) -> None:
    """A bad ``[telemetry]``, or one enabled without the extra installed, stops the boot."""
    settings = TelemetrySettings.from_config(getattr(config, "telemetry", None))
    module = missing_extra() if settings.enabled else None
    if module is not None:
        raise ConfigError(
            f"telemetry: exporting spans needs OpenTelemetry ({module} is not installed); "
            f"run {INSTALL_HINT}, or remove [telemetry] (or set telemetry.enabled = false)"
        )


@hookimpl
def roost_services(kernel: KernelAPI) -> list[ServiceDescriptor]:
    settings = TelemetrySettings.from_config(getattr(kernel.config, "telemetry", None))
    if not settings.enabled:
        return []
    from ._export import SpanExport

    return [ServiceDescriptor("otel", SpanExport(settings).run, start_timeout_s=10.0)]
