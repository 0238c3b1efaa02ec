"""Agent manifests: ``agents/<name>/agent.json`` → a frozen ``AgentManifest``.

Checked against the packaged ``agent.json.schema`` (JSON Schema 2020-12), then for what a
schema cannot say (the prompt file exists, names are unique), then structured with cattrs.
Every problem is a ``ManifestError`` naming the file, the JSON pointer and what was expected.
"""

from __future__ import annotations

import copy
import difflib
import functools
import importlib.resources
import importlib.util
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import cattrs

if TYPE_CHECKING:
    import jsonschema
    from jsonschema.exceptions import ValidationError

from ._errors import ManifestError, json_pointer
from ._hookspecs import McpServerDescriptor
from ._paths import read_text
from ._tools import ToolSpec, agent_tool_name, normalise_name
from ._trace import DEFAULT_MAX_DEPTH

MANIFEST_FILENAME = "agent.json"
SCHEMA_RESOURCE = "agent.json.schema"

MAX_MANIFEST_BYTES = 1_048_576
MAX_PROMPT_BYTES = 1_048_576
_MAX_ERRORS_PER_FILE = 50
_MEMORY = "<memory>"


# ---- the model -------------------------------------------------------------------------


@attrs.frozen
class ModelRef:
    """An alternative model (``model.fast`` / ``model.complex``)."""

    provider: str
    name: str | None = None
    parameters: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class ScriptCall:
    """One tool call of a scripted step; ``arguments`` values may hold ``{message}``."""

    tool: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class ScriptStep:
    """A scripted step: one call, or several run concurrently (``parallel``)."""

    calls: tuple[ScriptCall, ...]
    parallel: bool = False


@attrs.frozen
class ScriptRule:
    """If ``match`` (a Python regex) is found in the message: run ``steps``, then reply or ask."""

    match: str
    steps: tuple[ScriptStep, ...] = ()
    reply: str | None = None
    ask: str | None = None
    stream: bool = False

    @property
    def pattern(self) -> re.Pattern[str]:
        """The compiled ``match`` (validated when the manifest was loaded)."""
        return re.compile(self.match)


@attrs.frozen
class ModelScript:
    """The script the offline ``scripted`` provider follows: first matching rule wins."""

    rules: tuple[ScriptRule, ...] = ()
    default_reply: str | None = None


@attrs.frozen
class ModelConfig:
    """Which model drives the agent, with optional faster / stronger alternatives."""

    provider: str = "scripted"
    name: str | None = None
    parameters: Mapping[str, Any] = attrs.field(factory=dict)
    script: ModelScript | None = None
    fast: ModelRef | None = None
    complex: ModelRef | None = None

    def for_tier(self, tier: str | None) -> ModelConfig:
        """The model for ``tier`` (``"fast"``, ``"complex"``; None = this one), else this one."""
        if tier is None:
            return self
        if tier not in ("fast", "complex"):
            raise ValueError(f"unknown model tier {tier!r}; expected 'fast', 'complex' or None")
        ref: ModelRef | None = getattr(self, tier)
        if ref is None:
            return self
        script = self.script if ref.provider == self.provider else None
        return ModelConfig(ref.provider, ref.name, dict(ref.parameters), script)


@attrs.frozen
class AgentCapabilities:
    """Glob patterns of the tools the agent may call (nothing unless listed)."""

    tools: tuple[str, ...] = ()


@attrs.frozen
class McpExposure:
    """Which of the agent's tools others may call: deny by default, private wins."""

    expose_tools: tuple[str, ...] = ()
    private_tools: tuple[str, ...] = ()


@attrs.frozen
class A2ASkill:
    """A skill advertised in the agent's A2A card."""

    id: str
    name: str
    description: str
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    input_modes: tuple[str, ...] = ()
    output_modes: tuple[str, ...] = ()


@attrs.frozen
class A2AConfig:
    """Whether the agent is reachable over A2A, and the skills its card lists."""

    enabled: bool = True
    skills: tuple[A2ASkill, ...] = ()


@attrs.frozen
class AgentLimits:
    """Per-agent bounds on turns, tool time, call depth and concurrency, and per ``bash``
    command: address space per process (MiB), processes, its ``$TMPDIR``'s size (MiB)."""

    max_turns: int = 10
    tool_timeout_s: float = 60.0
    max_depth: int = DEFAULT_MAX_DEPTH
    max_concurrent_tools: int = 4
    max_concurrent_messages: int = 8
    tool_timeouts: Mapping[str, float] = attrs.field(factory=dict)
    bash_memory_mb: int = 4096
    bash_processes: int = 512
    bash_tmp_mb: int = 512


@attrs.frozen
class FileGrants:
    """Roots beyond its workspace and temp dir that an agent may read, or read and write."""

    read: tuple[Path, ...] = ()
    write: tuple[Path, ...] = ()


@attrs.frozen
class NetworkGrants:
    """TCP ports the agent's ``bash`` may connect to or bind (none by default)."""

    connect: tuple[int, ...] = ()
    bind: tuple[int, ...] = ()


@attrs.frozen
class AgentManifest:
    """A validated agent manifest. ``system_prompt`` holds the prompt text, inline or read
    from ``system_prompt_file``; ``path`` and ``base_dir``: where it came from (or None)."""

    name: str
    description: str
    version: str = "0.1.0"
    model: ModelConfig = attrs.field(factory=ModelConfig)
    system_prompt: str = ""
    system_prompt_file: Path | None = None
    capabilities: AgentCapabilities = attrs.field(factory=AgentCapabilities)
    mcp: McpExposure = attrs.field(factory=McpExposure)
    mcp_servers: tuple[McpServerDescriptor, ...] = ()
    a2a: A2AConfig = attrs.field(factory=A2AConfig)
    limits: AgentLimits = attrs.field(factory=AgentLimits)
    sandbox: str = "sandbox"
    workspace: Path | None = None
    env_allowlist: tuple[str, ...] = ()
    files: FileGrants = attrs.field(factory=FileGrants)
    network: NetworkGrants = attrs.field(factory=NetworkGrants)
    taint_policy: str | None = None
    path: Path | None = None
    base_dir: Path | None = None

    def workspace_dir(self, home: Path) -> Path:
        """The agent's workspace: ``workspace`` if set, else ``<home>/workspaces/<name>``."""
        return self.workspace if self.workspace is not None else home / "workspaces" / self.name


# ---- cattrs ----------------------------------------------------------------------------

_converter = cattrs.Converter()


def _structure_step(data: Mapping[str, Any], _type: type) -> ScriptStep:
    parallel = "parallel" in data
    calls = data["parallel"] if parallel else [data]
    return ScriptStep(
        tuple(ScriptCall(c["tool"], dict(c.get("arguments") or {})) for c in calls), parallel
    )


_converter.register_structure_hook(ScriptStep, _structure_step)


# ---- the schema ------------------------------------------------------------------------


def schema() -> dict[str, Any]:
    """The packaged ``agent.json.schema`` as a dict (a fresh copy; mutate freely)."""
    return copy.deepcopy(_validator().schema)


# How many (reference, value) pairs ``_validator`` remembers as valid.
_VALID_REFS_MAX = 4096


def _compiles(pattern: object) -> bool:
    """The ``regex`` format: ``re.error`` unless ``pattern`` compiles (for re's OverflowError and
    RecursionError too, which would crash the load of every agent)."""
    if isinstance(pattern, str):
        try:
            re.compile(pattern)
        except OverflowError as exc:
            raise re.error(str(exc)) from None
        except RecursionError:
            raise re.error("groups nested too deeply") from None
    return True


@functools.cache
def _validator(remember: bool = False) -> jsonschema.Draft202012Validator:
    """Draft 2020-12 validation of ``agent.json.schema``. With ``remember``, ``$ref`` keeps
    the values it found valid by subschema and canonical JSON (agents of one template share
    ``model`` or ``limits`` entries, checked once per boot). Sound as the schema has one
    ``$id`` and no dynamic references (a place in it always means one subschema) and only
    error-free values are kept. Only for values decoded from JSON text (an in-memory tuple
    has a list's JSON but is no array)."""
    import jsonschema  # here, not at the top: slow to import, and most starts never need it
    from jsonschema import validators

    resource = importlib.resources.files("roost.kernel").joinpath(SCHEMA_RESOURCE)
    loaded = json.loads(resource.read_text("utf-8"))
    jsonschema.Draft202012Validator.check_schema(loaded)
    regexes = jsonschema.FormatChecker(formats=())
    regexes.checks("regex", raises=re.error)(_compiles)  # each script rule's match
    if not remember:
        return jsonschema.Draft202012Validator(loaded, format_checker=regexes)
    check_ref = jsonschema.Draft202012Validator.VALIDATORS["$ref"]
    valid: set[tuple[int, str]] = set()
    canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False).encode

    def ref(validator: Any, ref: str, instance: Any, schema: Any) -> Iterator[Any]:
        try:
            key = (id(schema), canonical(instance))
        except ValueError:  # NaN or an infinity (no JSON text holds one): checked each time
            key = None
        if key is not None and key in valid:
            return
        errors = list(check_ref(validator, ref, instance, schema))
        if not errors and key is not None and len(valid) < _VALID_REFS_MAX:
            valid.add(key)
        yield from errors

    remembering = validators.extend(jsonschema.Draft202012Validator, {"$ref": ref})
    return remembering(loaded, format_checker=regexes)


def bundled_agents_dir() -> Path:
    """The directory of the agents shipped with roost (the ``roost.agents`` data package)."""
    spec = importlib.util.find_spec("roost.agents")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location)
        if candidate.is_dir():
            return candidate
    raise ManifestError(
        "roost.agents", "/", "the bundled agents package is missing; reinstall roost"
    )


# ---- error wording ---------------------------------------------------------------------


def _got(instance: Any) -> str:
    if isinstance(instance, dict):
        return "an object"
    if isinstance(instance, list):
        return "an empty list" if not instance else "a list"
    try:
        text = json.dumps(instance, ensure_ascii=False)
    except (TypeError, ValueError):  # an in-memory caller passed a non-JSON value
        text = f"a {type(instance).__name__}"
    return text if len(text) <= 60 else text[:57] + "…"


_TYPE_WORDS = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def _bounds(schema: Mapping[str, Any]) -> str:
    if "minimum" in schema and "maximum" in schema:
        return f" {schema['minimum']}-{schema['maximum']}"
    signs = (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"))
    parts = [f"{sign} {schema[key]}" for key, sign in signs if key in schema]
    return " " + " and ".join(parts) if parts else ""


def _describe(schema: Mapping[str, Any]) -> str:
    """What a (sub)schema accepts, in plain words: 'an integer ≥ 1', 'a list of strings'."""
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    if "pattern" in schema and "description" in schema:
        words = [schema["description"]]
        words += [_TYPE_WORDS[t] for t in types if t != "string"]
        return " or ".join(words)
    words = []
    for t in types:
        word = _TYPE_WORDS.get(t, t)
        if t in ("integer", "number"):
            word += _bounds(schema)
        elif t == "string":
            if "pattern" in schema:
                word += f" matching {schema['pattern']}"
            elif schema.get("minLength"):
                word = "a non-empty string"
        elif t == "array":
            word += _describe_items(schema.get("items"))
        words.append(word)
    return " or ".join(words) if words else "a valid value"


def _describe_items(items: Any) -> str:
    if not isinstance(items, Mapping):
        return ""
    ref = items.get("$ref")
    if isinstance(ref, str):
        return f" of {ref.rsplit('/', 1)[-1].replace('_', ' ')} objects"
    item_type = items.get("type")
    plural = {"string": "strings", "object": "objects", "integer": "integers"}
    return f" of {plural[item_type]}" if item_type in plural else ""


_LEAF_KEYWORDS = {
    "type",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "minLength",
    "pattern",
}


def _translate(error: ValidationError) -> list[tuple[str, str]]:
    """(pointer, expected) pairs for one jsonschema error."""
    where = json_pointer(error.absolute_path)
    keyword = error.validator
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    instance = error.instance
    if keyword in _LEAF_KEYWORDS:
        return [(where, f"expected {_describe(schema)}, got {_got(instance)}")]
    if keyword == "required":
        missing = [k for k in error.validator_value if k not in instance]
        why = ""
        if "then" in error.absolute_schema_path and isinstance(instance.get("type"), str):
            why = f" (needed when type is {instance['type']!r})"
        return [(where, f"missing required key {k!r}{why}") for k in missing]
    if keyword == "additionalProperties" and error.validator_value is False:
        allowed = list(schema.get("properties", {}))
        patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
        out = []
        for key in instance:
            if key in allowed or any(p.search(key) for p in patterns):
                continue
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problem = f"unknown key {key!r}{hint}; allowed keys here: {', '.join(allowed)}"
            out.append((json_pointer([*error.absolute_path, key]), problem))
        return out
    if keyword == "format":  # "regex", the only format the schema uses
        problem = f"{_got(instance)}: {error.cause}"
        return [(where, f"expected a valid Python regular expression, got {problem}")]
    if keyword == "minItems":
        return [(where, f"expected at least {error.validator_value} item(s), got {_got(instance)}")]
    if keyword in ("oneOf", "anyOf", "not") and "description" in schema:
        return [(where, f"expected {schema['description']}")]
    if error.context:
        from jsonschema.exceptions import best_match

        deepest = best_match(error.context)
        if deepest is not None and deepest is not error:
            return _translate(deepest)
    return [(where, error.message)]


# ---- checking --------------------------------------------------------------------------


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} in an object; keep only one of them")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON; use a number or a string")


def _parse_json(text: str) -> Any:
    """``text`` decoded; ValueError saying what is wrong if it is not strict JSON."""
    try:
        return json.loads(
            text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant
        )
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ValueError(f"invalid JSON at {where}: {exc.msg}") from None
    except RecursionError:
        raise ValueError("invalid JSON: nested too deeply") from None


def _repeats(items: Any, field: str, key: Callable[[str], str]) -> Iterator[tuple[int, str, str]]:
    """(index, value, first value of its key) of each repeated ``key(field)`` in ``items``."""
    seen: dict[str, str] = {}
    for index, item in enumerate(items if isinstance(items, list) else []):
        value = item.get(field) if isinstance(item, dict) else None
        if isinstance(value, str):
            if key(value) in seen:
                yield index, value, seen[key(value)]
            seen.setdefault(key(value), value)


def _check_unique(data: Any, source: str) -> list[ManifestError]:
    if not isinstance(data, dict):
        return []
    errors = []
    for index, name, first in _repeats(data.get("mcp_servers"), "name", normalise_name):
        clash = (
            f"{name!r} is used twice"
            if first == name
            else f"{name!r} clashes with {first!r} (their tool names would collide)"
        )
        problem = f"expected a unique server name; {clash}; rename one"
        errors.append(ManifestError(source, f"/mcp_servers/{index}/name", problem))
    a2a = data.get("a2a")
    skills = a2a.get("skills") if isinstance(a2a, dict) else None
    for index, skill_id, _ in _repeats(skills, "id", str):
        problem = f"expected a unique skill id; {skill_id!r} is used twice"
        errors.append(ManifestError(source, f"/a2a/skills/{index}/id", problem))
    return errors


def _resolve(base_dir: Path | None, path: str) -> Path:
    return (base_dir or Path.cwd()) / Path(path).expanduser()


def _load_prompt(
    data: Any, source: str, base_dir: Path | None
) -> tuple[str, Path | None, list[ManifestError]]:
    if not isinstance(data, dict):
        return "", None, []
    inline = data.get("system_prompt")
    name = data.get("system_prompt_file")
    if not isinstance(name, str) or not name:
        return (inline if isinstance(inline, str) else ""), None, []
    prompt_path = _resolve(base_dir, name)
    pointer = "/system_prompt_file"
    try:
        return read_text(prompt_path, MAX_PROMPT_BYTES), prompt_path, []
    except FileNotFoundError:
        problem = f"prompt file not found: {prompt_path}"
    except IsADirectoryError:
        problem = f"expected a file, but {prompt_path} is a directory"
    except (OSError, ValueError) as exc:
        problem = f"cannot read prompt file {prompt_path}: {exc}"
    return "", prompt_path, [ManifestError(source, pointer, problem)]


def _check(
    data: Any, source: str, base_dir: Path | None, path: Path | None
) -> tuple[AgentManifest | None, list[ManifestError]]:
    """Every problem with ``data``, and the manifest if there were none."""
    from jsonschema.exceptions import best_match

    errors: list[ManifestError] = []
    raw = list(_validator(remember=path is not None).iter_errors(data))  # path: JSON text
    best = best_match(raw)
    raw.sort(key=lambda error: error is not best)  # the most relevant first
    for error in raw:
        for pointer, expected in _translate(error):
            if not any(e.pointer == pointer and e.expected == expected for e in errors):
                errors.append(ManifestError(source, pointer, expected))
    errors += _check_unique(data, source)
    prompt, prompt_path, prompt_errors = _load_prompt(data, source, base_dir)
    errors += prompt_errors
    if errors:
        return None, errors[:_MAX_ERRORS_PER_FILE]
    fields = {k: v for k, v in data.items() if k not in ("$schema", "workspace")}
    fields.update(
        system_prompt=prompt, system_prompt_file=prompt_path, path=path, base_dir=base_dir
    )
    if data.get("workspace") is not None:
        fields["workspace"] = _resolve(base_dir, data["workspace"])
    if "files" in data:
        fields["files"] = {
            key: [_resolve(base_dir, p) for p in paths] for key, paths in data["files"].items()
        }
    return _converter.structure(fields, AgentManifest), []


def _check_file(path: Path, source: str) -> tuple[AgentManifest | None, list[ManifestError]]:
    try:
        text = read_text(path, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        problem = "file not found"
    except IsADirectoryError:
        problem = f"is a directory; expected a {MANIFEST_FILENAME} file"
    except (OSError, ValueError) as exc:
        problem = f"cannot read the file: {exc}"
    else:
        try:
            data = _parse_json(text)
        except ValueError as exc:
            problem = str(exc)
        else:
            absolute = path.absolute()
            return _check(data, source, absolute.parent, absolute)
    return None, [ManifestError(source, "/", problem)]


# ---- public API ------------------------------------------------------------------------


def parse_manifest(
    data: Any, *, source: str = _MEMORY, base_dir: Path | None = None
) -> AgentManifest:
    """Validate parsed JSON ``data`` (relative paths from ``base_dir``, default: cwd);
    raise the most relevant ``ManifestError``."""
    return _valid(*_check(data, source, base_dir, None))


def load_manifest(path: str | Path) -> AgentManifest:
    """Read, validate and convert one ``agent.json``; raise ``ManifestError`` if it is bad."""
    return _valid(*_check_file(Path(path), str(path)))


def _valid(manifest: AgentManifest | None, errors: list[ManifestError]) -> AgentManifest:
    if errors:
        raise errors[0]
    assert manifest is not None
    return manifest


def _manifest_files(location: Path) -> list[Path]:
    if location.is_file():
        return [location]
    if (location / MANIFEST_FILENAME).is_file():
        return [location / MANIFEST_FILENAME]
    # <location>/<name>/agent.json by name, as sorted(glob(...)) without a Path per folder.
    try:
        with os.scandir(location) as entries:
            names = sorted(e.name for e in entries)
    except OSError:
        return []
    files = (location / name / MANIFEST_FILENAME for name in names)
    return [file for file in files if file.is_file()]


def _load_files(
    files: Iterable[Path],
    found: dict[str, AgentManifest],
    by_tool: dict[str, AgentManifest],
    errors: list,
) -> None:
    """Add each file's manifest to ``found`` unless its name or ``agent_<name>`` tool
    (``by_tool`` indexes ``found`` by it) is taken; every problem goes to ``errors``."""
    for file in files:
        manifest, problems = _check_file(file, str(file))
        errors += problems
        if manifest is None:
            continue
        tool = agent_tool_name(manifest.name)
        other = by_tool.get(tool)
        if other is None:
            found[manifest.name] = by_tool[tool] = manifest
            continue
        if other.name == manifest.name:
            problem = f"duplicate agent name {manifest.name!r}: already defined in {other.path}"
        else:
            problem = (
                f"agent name {manifest.name!r} clashes with {other.name!r} from {other.path} "
                f"(both would be called as tool {tool!r})"
            )
        errors.append(ManifestError(str(file), "/name", problem + "; rename one of them"))


def load_agents(
    dirs: Iterable[str | Path], *, include_bundled: bool = True, config_file: str = "roost.toml"
) -> tuple[dict[str, AgentManifest], list[ManifestError]]:
    """Every valid manifest under ``dirs`` (``<dir>/<name>/agent.json``), bundled ones first,
    and the errors of bad ones (skipped), names defined twice (the first kept) and missing
    directories (naming ``config_file``)."""
    found: dict[str, AgentManifest] = {}
    by_tool: dict[str, AgentManifest] = {}
    errors: list[ManifestError] = []
    locations: list[Path] = []
    if include_bundled:
        try:
            locations.append(bundled_agents_dir())
        except ManifestError as exc:
            errors.append(exc)
    locations += [Path(d).expanduser() for d in dirs]
    scanned: set[Path] = set()
    for location in locations:
        key = location.resolve()
        if key in scanned:
            continue
        scanned.add(key)
        if not location.exists():
            problem = f"agents directory not found; fix [agents].dirs in {config_file}"
            errors.append(ManifestError(str(location), "/", problem))
            continue
        _load_files(_manifest_files(location), found, by_tool, errors)
    return found, errors


# Tools that arrive while roost runs (an MCP server connects, an A2A peer is discovered): a
# pattern for them matching nothing at load is no mistake, so it gets no warning.
_RUNTIME_TOOL_PREFIXES = ("mcp_", "mcp:", "a2a_", "a2a:")


def tool_pattern_warnings(manifest: AgentManifest, specs: Iterable[Any]) -> list[str]:
    """A warning for each ``mcp.expose_tools`` / ``private_tools`` entry matching none of
    ``specs``, naming the likely tool (MCP and A2A patterns are left out)."""
    if not manifest.mcp.expose_tools and not manifest.mcp.private_tools:
        return []
    from ._policy import matches

    if not isinstance(specs, (list, tuple)):  # not copied per agent: a host may have thousands
        specs = list(specs)
    where = str(manifest.path) if manifest.path is not None else f"agent {manifest.name}"
    out = []
    for field in ("expose_tools", "private_tools"):
        for index, pattern in enumerate(getattr(manifest.mcp, field)):
            if pattern.startswith(_RUNTIME_TOOL_PREFIXES) or any(
                matches(s, pattern) for s in specs
            ):
                continue
            close = difflib.get_close_matches(
                pattern.rsplit(":", 1)[-1], [s.name for s in specs], n=1
            )
            hint = f"; did you mean {close[0]!r}?" if close else ""
            out.append(
                f"{where}: at /mcp/{field}/{index}: {pattern!r} matches no tool{hint} "
                "(a pattern matches a tool's name, e.g. 'read', or its owner-qualified "
                "name, e.g. 'tools:read'; see `roost tools`)"
            )
    return out


def validate_files(
    paths: Iterable[str | Path], *, warnings: list[str] | None = None
) -> list[ManifestError]:
    """Every problem in the given manifests or directories (``roost validate``), names defined
    twice too; ``warnings`` gets ``tool_pattern_warnings`` (installed tools and these agents)."""
    errors: list[ManifestError] = []
    found: dict[str, AgentManifest] = {}
    by_tool: dict[str, AgentManifest] = {}
    for given in paths:
        location = Path(given)
        files = _manifest_files(location) if location.is_dir() else [location]
        if location.is_dir() and not files:
            errors.append(
                ManifestError(str(location), "/", f"no {MANIFEST_FILENAME} found in this directory")
            )
        _load_files(files, found, by_tool, errors)
    if warnings is not None and found:
        specs = _installed_tool_specs() + [
            ToolSpec(agent_tool_name(n), owner="agents") for n in found
        ]
        for manifest in found.values():
            warnings += tool_pattern_warnings(manifest, specs)
    return errors


def _installed_tool_specs() -> list[Any]:
    """The installed plugins' tools (default settings); a broken plugin lists none."""
    from ._config import default_config
    from ._plugins import PluginManager

    pm = PluginManager()
    pm.load_entry_points()
    return [
        t.spec
        for _name, tools in pm.call_each("roost_tools", config=default_config())
        for t in tools
        if hasattr(t, "spec")
    ]
