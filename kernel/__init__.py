"""roost.kernel — the microkernel: events, actors, trace, tools, policy, manifests, loop.

Import public names from here; the ``_name`` modules are private. A name's module loads on
first use (PEP 562), so a process pays only for the parts it touches: ``roost mcp`` answers
``initialize`` before the agent loop, the store and the manifests are imported.
"""

import functools as _functools
import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:  # what type checkers and editors see, and the table ``_public`` reads
    from . import _jsonrpc as jsonrpc
    from ._actor import (
        ActorContext,
        ActorHandler,
        ActorRef,
        ActorSystem,
        RestartPolicy,
        open_actor_system,
        reply_kind,
    )
    from ._agent import AgentReply, AgentRuntime
    from ._api import KernelAPI
    from ._audit import AuditRecord
    from ._boot import open_kernel
    from ._config import (
        AgentsConfig,
        HttpConfig,
        KernelConfig,
        PluginsConfig,
        RoostConfig,
        TaintConfig,
        ToolsConfig,
        default_config,
        find_config_file,
        load_config,
    )
    from ._deadlines import DeadlineTimer
    from ._errors import (
        ActorCrashed,
        ActorError,
        ActorStopped,
        AgentNotFound,
        AgentUnavailable,
        AskTimeout,
        ConfigError,
        InvalidInput,
        InvalidNumber,
        InvalidText,
        InvalidTraceContext,
        LoopDetected,
        MailboxFull,
        ManifestError,
        PluginError,
        RecursionLimitExceeded,
        RoostError,
        SandboxError,
        SessionConflict,
        TaintViolation,
        ToolArgumentsInvalid,
        ToolDenied,
        ToolError,
        ToolNameCollision,
        ToolNotFound,
        ToolTimeout,
        check_json_input,
        check_text,
        is_mapping,
        json_type_name,
    )
    from ._events import Event, EventKind, EventTap
    from ._hookspecs import (
        ENTRY_POINT_GROUP,
        McpServerDescriptor,
        ProviderDescriptor,
        RouteDescriptor,
        ServiceDescriptor,
        ToolVeto,
        hookimpl,
        hookspec,
    )
    from ._ids import uuid7
    from ._jsonrpc import Correlator, JsonRpcError
    from ._kernel import Kernel
    from ._loop import (
        Completion,
        CompletionRequest,
        LoopResult,
        Message,
        Provider,
        StreamDelta,
        Usage,
        run_loop,
    )
    from ._manifest import (
        A2AConfig,
        A2ASkill,
        AgentCapabilities,
        AgentLimits,
        AgentManifest,
        McpExposure,
        ModelConfig,
        ModelRef,
        ModelScript,
        ScriptCall,
        ScriptRule,
        ScriptStep,
        bundled_agents_dir,
        load_agents,
        load_manifest,
        parse_manifest,
        validate_files,
    )
    from ._manifest import schema as manifest_schema
    from ._messaging import result_from_jsonrpc
    from ._netguard import (
        AddressPins,
        PinnedTarget,
        Resolver,
        UrlRefused,
        check_url,
        classify_address,
        pin_url,
    )
    from ._outputs import (
        MAX_FILE_BYTES,
        MAX_RUN_BYTES,
        MAX_RUN_PARTS,
        Output,
        OutputPart,
        Outputs,
        outputs_to_json,
    )
    from ._paths import data_dir, database_path, resolve_data_dir, workspaces_dir
    from ._plugins import PluginFailure, PluginManager
    from ._policy import (
        Capabilities,
        Exposure,
        LoopGuard,
        TaintTracker,
        ToolSchemaInvalid,
        check_ping_pong,
        resolve_timeout,
        truncate,
        truncate_result,
        validate_arguments,
    )
    from ._proctrace import ProcessTraces
    from ._spans import NO_SPAN, Span, SpanKind
    from ._sqlite import SqliteDatabase, StoreError
    from ._store import SqliteStore, Store, StoredMessage, open_store
    from ._surface import (
        MESSAGE_TOOL,
        AgentSurface,
        SurfaceCall,
        ask_tool_spec,
        jsonrpc_error,
        unknown_tool_error,
    )
    from ._tools import (
        TAINT_UNTRUSTED,
        Tool,
        ToolCall,
        ToolContext,
        ToolRegistry,
        ToolResult,
        ToolSpec,
        agent_tool_name,
        namespaced,
        normalise_name,
    )
    from ._trace import DEFAULT_MAX_DEPTH, TraceContext

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "ENTRY_POINT_GROUP",
    "TAINT_UNTRUSTED",
    "ActorCrashed",
    "ActorError",
    "ActorStopped",
    "AgentNotFound",
    "AgentUnavailable",
    "AskTimeout",
    "ConfigError",
    "InvalidInput",
    "InvalidNumber",
    "InvalidText",
    "InvalidTraceContext",
    "check_json_input",
    "check_text",
    "Event",
    "EventKind",
    "EventTap",
    "LoopDetected",
    "ManifestError",
    "McpServerDescriptor",
    "PluginError",
    "PluginFailure",
    "PluginManager",
    "ProviderDescriptor",
    "RecursionLimitExceeded",
    "RoostError",
    "RouteDescriptor",
    "SandboxError",
    "SessionConflict",
    "TaintViolation",
    "Tool",
    "ToolArgumentsInvalid",
    "ToolCall",
    "ToolContext",
    "MAX_FILE_BYTES",
    "MAX_RUN_BYTES",
    "MAX_RUN_PARTS",
    "Output",
    "OutputPart",
    "Outputs",
    "outputs_to_json",
    "ToolDenied",
    "ToolError",
    "ToolNameCollision",
    "ToolNotFound",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "ToolTimeout",
    "ToolVeto",
    "TraceContext",
    "ProcessTraces",
    "NO_SPAN",
    "Span",
    "SpanKind",
    "agent_tool_name",
    "hookimpl",
    "hookspec",
    "namespaced",
    "normalise_name",
    # actor system
    "ActorContext",
    "ActorHandler",
    "ActorRef",
    "ActorSystem",
    "MailboxFull",
    "RestartPolicy",
    "open_actor_system",
    "reply_kind",
    "DeadlineTimer",
    # JSON-RPC (the full sans-I/O API is the ``jsonrpc`` namespace)
    "Correlator",
    "JsonRpcError",
    "jsonrpc",
    # manifests, configuration, data paths, store
    "A2AConfig",
    "A2ASkill",
    "AgentCapabilities",
    "AgentLimits",
    "AgentManifest",
    "AgentsConfig",
    "AuditRecord",
    "HttpConfig",
    "KernelConfig",
    "McpExposure",
    "ModelConfig",
    "ModelRef",
    "ModelScript",
    "PluginsConfig",
    "RoostConfig",
    "ScriptCall",
    "ScriptRule",
    "ScriptStep",
    "SqliteDatabase",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoredMessage",
    "TaintConfig",
    "ToolsConfig",
    "bundled_agents_dir",
    "data_dir",
    "database_path",
    "default_config",
    "find_config_file",
    "load_agents",
    "load_config",
    "load_manifest",
    "manifest_schema",
    "open_store",
    "parse_manifest",
    "resolve_data_dir",
    "validate_files",
    "workspaces_dir",
    # tool policy and the SSRF guard
    "AddressPins",
    "Capabilities",
    "Exposure",
    "LoopGuard",
    "PinnedTarget",
    "Resolver",
    "TaintTracker",
    "ToolSchemaInvalid",
    "UrlRefused",
    "check_ping_pong",
    "check_url",
    "classify_address",
    "pin_url",
    "resolve_timeout",
    "truncate",
    "truncate_result",
    "validate_arguments",
    "AgentReply",
    "AgentRuntime",
    "MESSAGE_TOOL",
    "AgentSurface",
    "SurfaceCall",
    "ask_tool_spec",
    "jsonrpc_error",
    "unknown_tool_error",
    "Kernel",
    "KernelAPI",
    "open_kernel",
    "result_from_jsonrpc",
    "Completion",
    "CompletionRequest",
    "LoopResult",
    "Message",
    "Provider",
    "StreamDelta",
    "Usage",
    "run_loop",
    "ServiceDescriptor",
    "is_mapping",
    "uuid7",
    "json_type_name",
]


@_functools.cache
def _public() -> dict[str, tuple[str, str]]:
    """Each public name → (its private module, its name there; "" for the module itself),
    read once from the ``TYPE_CHECKING`` imports above, the one list of them."""
    import ast

    with open(__file__, encoding="utf-8") as f:
        block = next(node for node in ast.parse(f.read()).body if isinstance(node, ast.If))
    return {
        alias.asname or alias.name: (node.module or alias.name, alias.name if node.module else "")
        for node in block.body
        for alias in node.names
    }


def __getattr__(name: str) -> _typing.Any:
    """Load a public name's module on first use."""
    try:
        module_name, attribute = _public()[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    try:
        module = _importlib.import_module(f".{module_name}", __name__)
        value = getattr(module, attribute) if attribute else module
    except AttributeError as exc:
        # Not an AttributeError: Python would report it as "no such name", losing the cause.
        raise ImportError(f"{__name__}.{name}: loading {__name__}.{module_name} failed: {exc!r}") from exc
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
