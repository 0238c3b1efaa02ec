"""roost.kernel — the microkernel: events, actors, trace, tools, policy, manifests, loop.

Import public names from here; the ``_name`` modules are private. A name's module loads on
first use (PEP 562), so a process pays only for the parts it touches: ``roost mcp`` answers
``initialize`` before the agent loop, the store and the manifests are imported.
"""

import functools as _functools
import importlib as _importlib
import typing as _typing

# The one list of public names (``X as X``: a re-export), read by type checkers and ``_public``
# (each name's module loads on first use); ``__all__`` is derived from it.
if _typing.TYPE_CHECKING:
    from . import _jsonrpc as jsonrpc  # noqa: F401 - the module itself, public as jsonrpc
    from ._actor import ActorContext as ActorContext
    from ._actor import ActorHandler as ActorHandler
    from ._actor import ActorRef as ActorRef
    from ._actor import ActorSystem as ActorSystem
    from ._actor import RestartPolicy as RestartPolicy
    from ._actor import open_actor_system as open_actor_system
    from ._actor import reply_kind as reply_kind
    from ._agent import AgentReply as AgentReply
    from ._agent import AgentRuntime as AgentRuntime
    from ._api import KernelAPI as KernelAPI
    from ._audit import AuditRecord as AuditRecord
    from ._boot import open_kernel as open_kernel
    from ._config import HTTP_HEADER_VALUE as HTTP_HEADER_VALUE
    from ._config import HTTP_TOKEN as HTTP_TOKEN
    from ._config import AgentsConfig as AgentsConfig
    from ._config import HttpConfig as HttpConfig
    from ._config import KernelConfig as KernelConfig
    from ._config import PluginsConfig as PluginsConfig
    from ._config import RoostConfig as RoostConfig
    from ._config import TaintConfig as TaintConfig
    from ._config import ToolsConfig as ToolsConfig
    from ._config import default_config as default_config
    from ._config import find_config_file as find_config_file
    from ._config import header_table as header_table
    from ._config import load_config as load_config
    from ._config import unknown_key as unknown_key
    from ._deadlines import DeadlineTimer as DeadlineTimer
    from ._errors import ActorCrashed as ActorCrashed
    from ._errors import ActorError as ActorError
    from ._errors import ActorStopped as ActorStopped
    from ._errors import AgentNotFound as AgentNotFound
    from ._errors import AgentUnavailable as AgentUnavailable
    from ._errors import AskTimeout as AskTimeout
    from ._errors import ConfigError as ConfigError
    from ._errors import InvalidInput as InvalidInput
    from ._errors import InvalidNumber as InvalidNumber
    from ._errors import InvalidText as InvalidText
    from ._errors import InvalidTraceContext as InvalidTraceContext
    from ._errors import LoopDetected as LoopDetected
    from ._errors import MailboxFull as MailboxFull
    from ._errors import ManifestError as ManifestError
    from ._errors import PluginError as PluginError
    from ._errors import RecursionLimitExceeded as RecursionLimitExceeded
    from ._errors import RoostError as RoostError
    from ._errors import SandboxError as SandboxError
    from ._errors import SessionConflict as SessionConflict
    from ._errors import TaintViolation as TaintViolation
    from ._errors import ToolArgumentsInvalid as ToolArgumentsInvalid
    from ._errors import ToolDenied as ToolDenied
    from ._errors import ToolError as ToolError
    from ._errors import ToolNameCollision as ToolNameCollision
    from ._errors import ToolNotFound as ToolNotFound
    from ._errors import ToolTimeout as ToolTimeout
    from ._errors import check_json_input as check_json_input
    from ._errors import check_text as check_text
    from ._errors import escape_lone_surrogates as escape_lone_surrogates
    from ._errors import is_mapping as is_mapping
    from ._errors import json_type_name as json_type_name
    from ._errors import number_setting as number_setting
    from ._errors import parse_int as parse_int
    from ._events import Event as Event
    from ._events import EventKind as EventKind
    from ._events import EventTap as EventTap
    from ._hookspecs import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
    from ._hookspecs import McpServerDescriptor as McpServerDescriptor
    from ._hookspecs import ProviderDescriptor as ProviderDescriptor
    from ._hookspecs import RouteDescriptor as RouteDescriptor
    from ._hookspecs import ServiceDescriptor as ServiceDescriptor
    from ._hookspecs import ToolVeto as ToolVeto
    from ._hookspecs import hookimpl as hookimpl
    from ._hookspecs import hookspec as hookspec
    from ._ids import uuid7 as uuid7
    from ._jsonrpc import Correlator as Correlator
    from ._jsonrpc import JsonRpcError as JsonRpcError
    from ._kernel import Kernel as Kernel
    from ._limits import child_open_file_limit as child_open_file_limit
    from ._limits import raise_open_file_limit as raise_open_file_limit
    from ._logs import REDACTED_FOR_LOG as REDACTED_FOR_LOG
    from ._logs import RedactingFormatter as RedactingFormatter
    from ._logs import RedactingStreamHandler as RedactingStreamHandler
    from ._logs import redact_for_log as redact_for_log
    from ._logs import redact_from_logs as redact_from_logs
    from ._loop import Completion as Completion
    from ._loop import CompletionRequest as CompletionRequest
    from ._loop import LoopResult as LoopResult
    from ._loop import Message as Message
    from ._loop import Provider as Provider
    from ._loop import StreamDelta as StreamDelta
    from ._loop import Usage as Usage
    from ._loop import run_loop as run_loop
    from ._manifest import A2AConfig as A2AConfig
    from ._manifest import A2ASkill as A2ASkill
    from ._manifest import AgentCapabilities as AgentCapabilities
    from ._manifest import AgentLimits as AgentLimits
    from ._manifest import AgentManifest as AgentManifest
    from ._manifest import McpExposure as McpExposure
    from ._manifest import ModelConfig as ModelConfig
    from ._manifest import ModelRef as ModelRef
    from ._manifest import ModelScript as ModelScript
    from ._manifest import ScriptCall as ScriptCall
    from ._manifest import ScriptRule as ScriptRule
    from ._manifest import ScriptStep as ScriptStep
    from ._manifest import bundled_agents_dir as bundled_agents_dir
    from ._manifest import load_agents as load_agents
    from ._manifest import load_manifest as load_manifest
    from ._manifest import parse_manifest as parse_manifest
    from ._manifest import schema as manifest_schema  # noqa: F401 - public as manifest_schema
    from ._manifest import validate_files as validate_files
    from ._messaging import result_from_jsonrpc as result_from_jsonrpc
    from ._netguard import AddressPins as AddressPins
    from ._netguard import PinnedTarget as PinnedTarget
    from ._netguard import Resolver as Resolver
    from ._netguard import UrlRefused as UrlRefused
    from ._netguard import check_url as check_url
    from ._netguard import classify_address as classify_address
    from ._netguard import pin_url as pin_url
    from ._netguard import public_url as public_url
    from ._outputs import MAX_FILE_BYTES as MAX_FILE_BYTES
    from ._outputs import MAX_RUN_BYTES as MAX_RUN_BYTES
    from ._outputs import MAX_RUN_PARTS as MAX_RUN_PARTS
    from ._outputs import Output as Output
    from ._outputs import OutputPart as OutputPart
    from ._outputs import Outputs as Outputs
    from ._outputs import outputs_to_json as outputs_to_json
    from ._paths import data_dir as data_dir
    from ._paths import database_path as database_path
    from ._paths import resolve_data_dir as resolve_data_dir
    from ._paths import workspaces_dir as workspaces_dir
    from ._plugins import PluginFailure as PluginFailure
    from ._plugins import PluginManager as PluginManager
    from ._policy import Capabilities as Capabilities
    from ._policy import Exposure as Exposure
    from ._policy import LoopGuard as LoopGuard
    from ._policy import TaintTracker as TaintTracker
    from ._policy import ToolSchemaInvalid as ToolSchemaInvalid
    from ._policy import check_ping_pong as check_ping_pong
    from ._policy import resolve_timeout as resolve_timeout
    from ._policy import truncate as truncate
    from ._policy import truncate_result as truncate_result
    from ._policy import validate_arguments as validate_arguments
    from ._proctrace import ProcessTraces as ProcessTraces
    from ._spans import NO_SPAN as NO_SPAN
    from ._spans import Span as Span
    from ._spans import SpanKind as SpanKind
    from ._sqlite import SqliteDatabase as SqliteDatabase
    from ._sqlite import StoreError as StoreError
    from ._store import SqliteStore as SqliteStore
    from ._store import Store as Store
    from ._store import StoredMessage as StoredMessage
    from ._store import open_store as open_store
    from ._surface import MESSAGE_TOOL as MESSAGE_TOOL
    from ._surface import AgentSurface as AgentSurface
    from ._surface import SurfaceCall as SurfaceCall
    from ._surface import ask_tool_spec as ask_tool_spec
    from ._surface import jsonrpc_error as jsonrpc_error
    from ._surface import unknown_tool_error as unknown_tool_error
    from ._tools import TAINT_UNTRUSTED as TAINT_UNTRUSTED
    from ._tools import Tool as Tool
    from ._tools import ToolCall as ToolCall
    from ._tools import ToolContext as ToolContext
    from ._tools import ToolRegistry as ToolRegistry
    from ._tools import ToolResult as ToolResult
    from ._tools import ToolSpec as ToolSpec
    from ._tools import agent_tool_name as agent_tool_name
    from ._tools import namespaced as namespaced
    from ._tools import normalise_name as normalise_name
    from ._tools import redact as redact
    from ._tools import redacted_head as redacted_head
    from ._trace import DEFAULT_MAX_DEPTH as DEFAULT_MAX_DEPTH
    from ._trace import TraceContext as TraceContext
    from ._version import roost_version as roost_version


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
    if name == "__all__":
        return list(_public())
    try:
        module_name, attribute = _public()[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    try:
        module = _importlib.import_module(f".{module_name}", __name__)
        value = getattr(module, attribute) if attribute else module
    except AttributeError as exc:
        # Not an AttributeError: Python would report it as "no such name", losing the cause.
        raise ImportError(
            f"{__name__}.{name}: loading {__name__}.{module_name} failed: {exc!r}"
        ) from exc
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_public(), "__all__"})
