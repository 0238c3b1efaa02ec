"""Agent manifests: schema, loader, error wording, discovery."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jsonschema
import pytest
from roost.kernel import (
    AgentManifest,
    ManifestError,
    McpServerDescriptor,
    ModelConfig,
    ScriptStep,
    ToolSpec,
    bundled_agents_dir,
    load_agents,
    load_manifest,
    manifest_schema,
    parse_manifest,
    resolve_timeout,
    validate_files,
)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"


def errors_of(data, **kwargs) -> list[ManifestError]:
    try:
        parse_manifest(data, **kwargs)
    except ManifestError as exc:
        return [exc]
    return []


def error_of(data, **kwargs) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        parse_manifest(data, **kwargs)
    return info.value


def base(**extra):
    return {"name": "worker", "description": "Does the work", **extra}


# ---- the schema ------------------------------------------------------------------------


def test_schema_is_valid_2020_12_with_an_id():
    loaded = manifest_schema()
    jsonschema.Draft202012Validator.check_schema(loaded)
    assert loaded["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert loaded["$id"] == "https://roost.dev/schemas/agent.json"


def test_packaged_schema_is_the_repo_root_file_through_a_symlink():
    link = REPO / "kernel" / "agent.json.schema"
    assert link.is_symlink()
    assert link.resolve() == (REPO / "agent.json.schema").resolve()
    assert manifest_schema() == json.loads((REPO / "agent.json.schema").read_text())


def test_schema_returns_a_copy_callers_cannot_corrupt():
    manifest_schema()["properties"].clear()
    assert "name" in manifest_schema()["properties"]
    assert parse_manifest(base()).name == "worker"


def test_schema_alone_rejects_a_typo_for_editors():
    validator = jsonschema.Draft202012Validator(manifest_schema())
    assert not validator.is_valid(base(capabilites={"tools": []}))
    assert validator.is_valid(base())


# ---- loading valid manifests -----------------------------------------------------------


def test_full_manifest_loads_every_field():
    path = FIXTURES / "valid" / "full" / "agent.json"
    m = load_manifest(path)
    assert m.name == "worker"
    assert m.path == path.absolute()
    assert m.base_dir == path.parent.absolute()
    assert m.system_prompt == "You are the worker.\nBe brief.\n"
    assert m.system_prompt_file == path.parent.absolute() / "prompt.md"
    assert m.model.provider == "scripted"
    assert m.model.parameters == {"temperature": 0, "nested": {"anything": [1, 2]}}
    assert m.model.fast.provider == "ollama" and m.model.complex is None
    rule, ask_rule = m.model.script.rules
    assert rule.pattern.search("please REVIEW this")
    assert rule.stream is True and rule.reply == "Reviewed: {result}"
    single, parallel = rule.steps
    assert single == ScriptStep(calls=(single.calls[0],), parallel=False)
    assert single.calls[0].tool == "agent_reviewer"
    assert single.calls[0].arguments == {"message": "{message}"}
    assert parallel.parallel and [c.tool for c in parallel.calls] == ["read", "grep"]
    assert parallel.calls[1].arguments == {}
    assert ask_rule.ask == "Which file?" and ask_rule.steps == ()
    assert m.model.script.default_reply == "Done: {message}"
    assert m.capabilities.tools == (
        "read",
        "grep",
        "agent_reviewer",
        "mcp_github_*",
        "fs:read_file",
    )
    assert m.mcp.expose_tools == ("read", "grep") and m.mcp.private_tools == ("bash",)
    github, docs = m.mcp_servers
    assert isinstance(github, McpServerDescriptor)
    assert github.env == ("GITHUB_TOKEN",) and github.timeout_secs == 30.0
    assert github.transport["command"] == "npx"
    assert docs.transport["url"] == "https://example.com/mcp" and docs.timeout_secs == 30.0
    assert m.a2a.enabled and m.a2a.skills[0].tags == ("code",)
    limits = m.limits
    for tool, seconds in (("bash", 120.0), ("read", 60.0)):
        timeout = resolve_timeout(ToolSpec(tool), limits.tool_timeout_s, limits.tool_timeouts)
        assert timeout == seconds
    assert m.sandbox == "read-only"
    assert m.workspace == path.parent.absolute() / "ws"
    assert m.env_allowlist == ("LANG",)
    assert m.taint_policy == "warn"


def test_minimal_manifest_gets_the_documented_defaults(tmp_path):
    m = load_manifest(FIXTURES / "valid" / "minimal" / "agent.json")
    assert m.model == ModelConfig(provider="scripted")
    assert m.system_prompt == "" and m.system_prompt_file is None
    assert m.capabilities.tools == ()
    assert m.mcp.expose_tools == () and m.mcp.private_tools == ()
    assert m.a2a.enabled is True and m.a2a.skills == ()
    limits = m.limits
    assert (limits.max_turns, limits.tool_timeout_s, limits.max_depth) == (10, 60.0, 5)
    assert (limits.max_concurrent_tools, limits.max_concurrent_messages) == (4, 8)
    assert m.sandbox == "sandbox" and m.taint_policy is None and m.workspace is None
    assert m.workspace_dir(tmp_path) == tmp_path / "workspaces" / "minimal"


def test_lists_become_tuples_and_the_manifest_is_frozen():
    m = parse_manifest(base(capabilities={"tools": ["read"]}))
    assert isinstance(m.capabilities.tools, tuple)
    with pytest.raises(AttributeError):
        m.name = "other"  # type: ignore[misc]


def test_inline_system_prompt():
    assert parse_manifest(base(system_prompt="Be terse.")).system_prompt == "Be terse."


def test_model_tier_falls_back_to_the_main_model():
    m = parse_manifest(
        base(
            model={
                "provider": "openai",
                "name": "big",
                "fast": {"provider": "openai", "name": "small"},
            }
        )
    )
    assert m.model.for_tier("fast").name == "small"
    assert m.model.for_tier("complex") is m.model
    assert m.model.for_tier(None) is m.model
    with pytest.raises(ValueError, match="unknown model tier"):
        m.model.for_tier("medium")


def test_bundled_agents_dir_is_the_agents_package():
    found = bundled_agents_dir()
    assert found.is_dir()
    assert found.resolve() == (REPO / "agents").resolve()


def test_bundled_agents_are_all_valid():
    agents, errors = load_agents([], include_bundled=True)
    assert errors == []
    for name, manifest in agents.items():
        assert manifest.name == name
        assert manifest.path.parent.name == name


# ---- error wording ---------------------------------------------------------------------


def test_wrong_type_names_the_pointer_and_what_was_expected():
    err = error_of(base(limits={"max_turns": "ten"}), source="a/agent.json")
    assert err.file == "a/agent.json"
    assert err.pointer == "/limits/max_turns"
    assert err.expected == 'expected an integer 1-1000, got "ten"'
    assert str(err) == 'a/agent.json: at /limits/max_turns: expected an integer 1-1000, got "ten"'


def test_out_of_range_number():
    err = error_of(base(limits={"tool_timeout_s": 0}))
    assert err.pointer == "/limits/tool_timeout_s"
    assert "expected a number > 0" in err.expected and err.expected.endswith("got 0")


def test_unknown_key_suggests_the_closest_and_lists_allowed_keys():
    err = error_of(base(mcp={"expose_tool": ["read"]}))
    assert err.pointer == "/mcp/expose_tool"
    assert err.expected == (
        "unknown key 'expose_tool' (did you mean 'expose_tools'?); "
        "allowed keys here: expose_tools, private_tools"
    )


def test_unknown_top_level_key_without_a_close_match():
    err = error_of(base(zzzz=1))
    assert err.pointer == "/zzzz"
    assert "did you mean" not in err.expected
    assert "allowed keys here:" in err.expected and "capabilities" in err.expected


def test_missing_required_key():
    err = error_of({"name": "worker"})
    assert err.pointer == "/"
    assert err.expected == "missing required key 'description'"


def test_name_pattern_is_explained():
    err = error_of(base(name="Worker"))
    assert err.pointer == "/name"
    assert "lowercase" in err.expected and err.expected.endswith('got "Worker"')


def test_blank_description_is_rejected():
    assert error_of(base(description="   ")).pointer == "/description"


def test_enum_lists_the_choices():
    err = error_of(base(sandbox="none"))
    assert err.expected == 'expected one of "sandbox", "read-only", "rwx", got "none"'
    err = error_of(base(taint_policy="ignore"))
    assert err.expected == 'expected one of null, "block", "warn", "allow", got "ignore"'


def test_top_level_must_be_an_object():
    for data in ([], "worker", None, 3):
        err = error_of(data)
        assert err.pointer == "/" and err.expected.startswith("expected an object, got")


def test_both_prompt_forms_are_refused():
    errs = errors_of(base(system_prompt="x", system_prompt_file="p.md"))
    assert errs and "either system_prompt or system_prompt_file, not both" in str(errs[0])


def test_stdio_transport_needs_a_command_and_http_a_url():
    err = error_of(base(mcp_servers=[{"name": "x", "transport": {"type": "stdio"}}]))
    assert err.pointer == "/mcp_servers/0/transport"
    assert err.expected == "missing required key 'command' (needed when type is 'stdio')"
    err = error_of(base(mcp_servers=[{"name": "x", "transport": {"type": "sse"}}]))
    assert err.expected == "missing required key 'url' (needed when type is 'sse')"
    err = error_of(base(mcp_servers=[{"name": "x", "transport": {"type": "ws"}}]))
    assert err.pointer == "/mcp_servers/0/transport/type"
    err = error_of(
        base(mcp_servers=[{"name": "x", "transport": {"type": "http", "url": "ftp://x"}}])
    )
    assert err.pointer == "/mcp_servers/0/transport/url" and "http://" in err.expected


def test_transport_allows_extra_keys():
    m = parse_manifest(
        base(
            mcp_servers=[{"name": "x", "transport": {"type": "stdio", "command": "c", "extra": 1}}]
        )
    )
    assert m.mcp_servers[0].transport["extra"] == 1


def test_duplicate_server_and_skill_names():
    err = error_of(
        base(
            mcp_servers=[
                {"name": "git-hub", "transport": {"type": "stdio", "command": "a"}},
                {"name": "git_hub", "transport": {"type": "stdio", "command": "b"}},
            ]
        )
    )
    assert err.pointer == "/mcp_servers/1/name" and "collide" in err.expected
    skill = {"id": "s", "name": "S", "description": "d"}
    err = error_of(base(a2a={"skills": [skill, skill]}))
    assert err.pointer == "/a2a/skills/1/id"


def test_bad_regex_names_its_pointer():
    err = error_of(base(model={"script": {"rules": [{"match": "ok"}, {"match": "(unclosed"}]}}))
    assert err.pointer == "/model/script/rules/1/match"
    assert "regular expression" in err.expected and "(unclosed" in err.expected


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("a{4294967296}", "repetition number is too large"),  # re.compile: OverflowError
        ("(" * 1000 + ")" * 1000, "nested too deeply"),  # re.compile: RecursionError
    ],
)
def test_regex_re_cannot_compile_is_a_manifest_error_not_a_crash(tmp_path, pattern, why):
    err = error_of(base(model={"script": {"rules": [{"match": pattern}]}}))
    assert err.pointer == "/model/script/rules/0/match" and why in err.expected
    # In a directory, the bad manifest is reported and skipped; the good one still loads.
    for name, match in (("bad", pattern), ("good", "hi")):
        (tmp_path / name).mkdir()
        rules = [{"match": match}]
        manifest = base(name=name, model={"provider": "script", "script": {"rules": rules}})
        (tmp_path / name / "agent.json").write_text(json.dumps(manifest))
    agents, errors = load_agents([tmp_path], include_bundled=False)
    assert list(agents) == ["good"]
    assert [e.pointer for e in errors] == ["/model/script/rules/0/match"]


def test_step_must_be_a_call_or_a_parallel_group():
    for step in ({}, {"tool": "a", "parallel": [{"tool": "b"}]}, {"arguments": {}}):
        err = error_of(base(model={"script": {"rules": [{"match": "x", "steps": [step]}]}}))
        assert err.pointer == "/model/script/rules/0/steps/0"
        assert "either" in err.expected and "parallel" in err.expected
    err = error_of(base(model={"script": {"rules": [{"match": "x", "steps": [{"tool": 5}]}]}}))
    assert err.pointer == "/model/script/rules/0/steps/0/tool"


def test_free_form_parameters_accept_anything():
    m = parse_manifest(base(model={"parameters": {"anything": {"goes": [1, None, "x"]}}}))
    assert m.model.parameters["anything"]["goes"] == [1, None, "x"]


def test_all_errors_are_collected_for_validate(tmp_path):
    file = tmp_path / "agent.json"
    file.write_text(json.dumps(base(sandbox="x", limits={"max_turns": 0}, capabilites={})))
    pointers = {e.pointer for e in validate_files([file])}
    assert pointers == {"/sandbox", "/limits/max_turns", "/capabilites"}


# ---- files -----------------------------------------------------------------------------


def test_malformed_json_reports_line_and_column():
    path = FIXTURES / "invalid" / "malformed.json"
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert info.value.pointer == "/"
    assert "invalid JSON at line 4, column 1" in info.value.expected
    assert info.value.file == str(path)


def test_duplicate_json_key_is_refused():
    with pytest.raises(ManifestError, match="duplicate key 'name'"):
        load_manifest(FIXTURES / "invalid" / "duplicate_key.json")


def test_nan_is_not_json(tmp_path):
    file = tmp_path / "agent.json"
    file.write_text('{"name": "w", "description": "d", "limits": {"tool_timeout_s": NaN}}')
    with pytest.raises(ManifestError, match="NaN is not valid JSON"):
        load_manifest(file)


def test_missing_prompt_file_is_named():
    path = FIXTURES / "invalid" / "missing_prompt" / "agent.json"
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert info.value.pointer == "/system_prompt_file"
    assert str(path.parent.absolute() / "nowhere.md") in info.value.expected


def test_missing_file_directory_and_binary_garbage(tmp_path):
    with pytest.raises(ManifestError, match="file not found"):
        load_manifest(tmp_path / "nope.json")
    with pytest.raises(ManifestError, match="is a directory"):
        load_manifest(tmp_path)
    garbage = tmp_path / "agent.json"
    garbage.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ManifestError, match="not valid UTF-8"):
        load_manifest(garbage)


def test_oversized_manifest_is_refused(tmp_path):
    big = tmp_path / "agent.json"
    big.write_text(json.dumps(base(system_prompt="x" * 1_100_000)))
    with pytest.raises(ManifestError, match="larger than"):
        load_manifest(big)


def test_utf8_bom_is_accepted(tmp_path):
    file = tmp_path / "agent.json"
    file.write_bytes(b"\xef\xbb\xbf" + json.dumps(base()).encode())
    assert load_manifest(file).name == "worker"


@pytest.mark.parametrize(
    ("fixture", "pointer"),
    [
        ("unknown_key.json", "/mcp/expose_tool"),
        ("bad_limits.json", "/limits/max_turns"),
        ("bad_regex.json", "/model/script/rules/1/match"),
        ("stdio_without_command.json", "/mcp_servers/0/transport"),
    ],
)
def test_invalid_fixtures(fixture, pointer):
    path = FIXTURES / "invalid" / fixture
    pointers = [e.pointer for e in validate_files([path])]
    assert pointer in pointers
    assert all(e.file == str(path) for e in validate_files([path]))


def test_validate_files_on_valid_files_and_directories():
    assert validate_files([FIXTURES / "valid" / "full" / "agent.json"]) == []
    assert validate_files([FIXTURES / "valid"]) == []
    assert validate_files([FIXTURES / "valid" / "minimal"]) == []


def test_validate_files_reports_missing_paths_and_empty_dirs(tmp_path):
    errs = validate_files([tmp_path / "absent.json", tmp_path])
    assert len(errs) == 2
    assert "file not found" in errs[0].expected
    assert "no agent.json" in errs[1].expected


# ---- discovery -------------------------------------------------------------------------


def test_load_agents_skips_bad_manifests_and_keeps_good_ones(tmp_path):
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "agent.json").write_text(json.dumps(base(name="good")))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "agent.json").write_text("{nope")
    (tmp_path / "empty").mkdir()  # no manifest: ignored
    agents, errors = load_agents([tmp_path], include_bundled=False)
    assert list(agents) == ["good"]
    assert len(errors) == 1 and errors[0].file == str(tmp_path / "bad" / "agent.json")


def test_duplicate_names_report_both_files():
    first = FIXTURES / "dup_a"
    second = FIXTURES / "dup_b"
    agents, errors = load_agents([first, second], include_bundled=False)
    assert agents["worker"].description == "First worker"
    assert len(errors) == 1
    err = errors[0]
    assert err.file == str(second / "worker" / "agent.json")
    assert str((first / "worker" / "agent.json").absolute()) in err.expected
    assert err.pointer == "/name"


def test_a_model_found_valid_once_is_still_checked_in_its_place():
    """Validation remembers the referenced values it found valid (agents from one template
    share them); that never hides an error, here or elsewhere in the manifest."""
    model = {"provider": "scripted", "script": {"rules": [{"match": ".", "reply": "ok"}]}}
    assert parse_manifest(base(model=model)).model.provider == "scripted"
    assert parse_manifest(base(name="again", model=dict(model))).name == "again"
    # The same model beside a bad field: the field is still reported.
    err = error_of(base(model=dict(model), limits={"max_turns": 0}))
    assert err.pointer == "/limits/max_turns"
    # A model one value away from the remembered one is checked afresh, every time.
    bad = {"provider": "scripted", "script": {"rules": [{"match": ".", "reply": 5}]}}
    for _ in range(2):
        assert error_of(base(model=bad)).pointer == "/model/script/rules/0/reply"
    # The same mapping changed in place after it was found valid.
    changed = base(model={"provider": "scripted", "script": {"rules": [{"match": "."}]}})
    parse_manifest(changed)
    changed["model"]["script"]["rules"][0]["reply"] = ["not", "text"]
    assert error_of(changed).pointer == "/model/script/rules/0/reply"


def test_a_tuple_never_passes_where_the_same_list_was_found_valid():
    """The remembered values were keyed by their JSON text, which a tuple shares with a
    list: after a manifest gave ``files.read`` as ``["/srv"]``, an in-memory one giving it
    as ``("/srv",)`` (not an array) passed; before, it did not."""
    assert error_of(base(files={"read": ("/srv",)})).pointer == "/files/read"
    parse_manifest(base(files={"read": ["/srv"]}))
    assert error_of(base(files={"read": ("/srv",)})).pointer == "/files/read"


def _write_agents(root: Path, count: int) -> Path:
    for i in range(count):
        folder = root / f"a{i:05d}"
        folder.mkdir(parents=True)
        (folder / "agent.json").write_text(json.dumps(base(name=f"a{i:05d}")))
    return root


def _load_seconds(*roots: Path, rounds: int = 5) -> list[float]:
    """The best CPU time of ``load_agents`` on each root, over interleaved rounds (the machine
    is shared: a burst of load elsewhere hits every root alike)."""
    best = [float("inf")] * len(roots)
    for _ in range(rounds):
        for i, root in enumerate(roots):
            start = time.process_time()  # CPU time: others' load on the machine does not count
            agents, errors = load_agents([root], include_bundled=False)
            best[i] = min(best[i], time.process_time() - start)
            assert errors == []
    return best


def test_duplicate_name_check_is_not_quadratic(tmp_path):
    """Each new agent's name was compared with every agent loaded before it: 10,000
    manifests took most of 15 s. Twice the manifests must take about twice the time
    (quadratic would be four times)."""
    small = _write_agents(tmp_path / "small", 1500)
    large = _write_agents(tmp_path / "large", 3000)
    load_agents([small], include_bundled=False)  # warm up: the schema validator is built once
    small_s, large_s = _load_seconds(small, large)
    ratio = large_s / small_s
    assert ratio < 2.8, f"loading 2x the manifests took {ratio:.2f}x the time"


def test_names_that_become_the_same_tool_clash():
    agents, errors = load_agents([FIXTURES / "clash"], include_bundled=False)
    assert len(agents) == 1 and len(errors) == 1
    assert "agent_a_b" in errors[0].expected


def test_same_directory_twice_is_scanned_once():
    valid = FIXTURES / "valid"
    agents, errors = load_agents([valid, valid / ".." / "valid"], include_bundled=False)
    assert errors == [] and set(agents) == {"worker", "minimal"}


def test_missing_agents_dir_is_an_error_not_a_crash(tmp_path):
    agents, errors = load_agents([tmp_path / "absent"], include_bundled=False)
    assert agents == {} and "agents directory not found" in errors[0].expected


def test_user_agent_with_a_bundled_name_is_reported(tmp_path):
    bundled, _ = load_agents([], include_bundled=True)
    if not bundled:
        pytest.skip("no bundled agents yet")
    name = sorted(bundled)[0]
    (tmp_path / name).mkdir()
    (tmp_path / name / "agent.json").write_text(json.dumps(base(name=name)))
    agents, errors = load_agents([tmp_path], include_bundled=True)
    assert agents[name].path == bundled[name].path
    assert [e.pointer for e in errors] == ["/name"]


def test_relative_prompt_resolves_against_base_dir(tmp_path):
    (tmp_path / "p.md").write_text("hello")
    m = parse_manifest(base(system_prompt_file="p.md"), base_dir=tmp_path)
    assert m.system_prompt == "hello"


def test_prompt_path_that_is_a_directory_is_reported(tmp_path):
    (tmp_path / "p.md").mkdir()
    err = error_of(base(system_prompt_file="p.md"), base_dir=tmp_path)
    assert err.pointer == "/system_prompt_file" and "is a directory" in err.expected


def test_unreadable_prompt_is_reported(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root can read anything")
    prompt = tmp_path / "p.md"
    prompt.write_text("x")
    prompt.chmod(0)
    err = error_of(base(system_prompt_file="p.md"), base_dir=tmp_path)
    assert err.pointer == "/system_prompt_file"


def test_manifest_type_is_exported():
    assert AgentManifest.__module__.startswith("roost.kernel")


def test_deeply_nested_json_is_an_error_not_a_crash(tmp_path):
    file = tmp_path / "agent.json"
    file.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ManifestError, match="nested too deeply"):
        load_manifest(file)


def test_in_memory_non_json_values_are_reported():
    err = error_of(base(capabilities={"tools": {"read"}}))
    assert err.pointer == "/capabilities/tools" and err.expected.endswith("got a set")


# ---- MCP client options on mcp_servers[] (same as roost.toml) ---------------------------


def _server(**options):
    return {"name": "x", "transport": {"type": "http", "url": "http://127.0.0.1:9/mcp"}, **options}


def test_mcp_server_client_options_are_accepted():
    m = parse_manifest(
        base(mcp_servers=[_server(protocol="2025-06-18", sampling=True, allow_local=True)])
    )
    server = m.mcp_servers[0]
    assert (server.protocol, server.sampling, server.allow_local) == ("2025-06-18", True, True)
    plain = parse_manifest(base(mcp_servers=[_server()])).mcp_servers[0]
    assert (plain.protocol, plain.sampling, plain.allow_local) == ("auto", False, False)


@pytest.mark.parametrize(
    "options, pointer, phrase",
    [
        ({"protocol": "v9"}, "/mcp_servers/0/protocol", 'expected one of "auto", "2026-07-28"'),
        ({"protocol": None}, "/mcp_servers/0/protocol", 'expected one of "auto"'),
        ({"sampling": "yes"}, "/mcp_servers/0/sampling", 'expected true or false, got "yes"'),
        ({"allow_local": 1}, "/mcp_servers/0/allow_local", "expected true or false, got 1"),
    ],
)
def test_bad_mcp_server_client_options_name_the_field(options, pointer, phrase):
    err = error_of(base(mcp_servers=[_server(**options)]))
    assert err.pointer == pointer
    assert phrase in err.expected


@pytest.mark.parametrize("timeout", [10**400, 1e400, 86401])
def test_an_mcp_server_timeout_past_a_day_is_refused_naming_it_not_a_structuring_crash(timeout):
    # 10**400 passed the schema (no maximum) and then broke cattrs' float(): a
    # ClassValidationError with a traceback instead of a ManifestError; 1e400 (infinity)
    # was kept as a timeout that never fires. roost.toml's [[mcp_servers]] caps it at a day.
    server = {"name": "x", "timeout_secs": timeout, "transport": {"type": "stdio", "command": "x"}}
    err = error_of(base(mcp_servers=[server]))
    assert err.pointer == "/mcp_servers/0/timeout_secs" and "86400" in err.expected


@pytest.mark.parametrize("window", [10**400, 1e400, 0, 255, 100_000_001, 1.5, True])
def test_a_context_window_no_model_has_is_refused_naming_it(window):
    # 10**400 was kept, then every request of the agent failed: int(window * 0.9) raised
    # OverflowError in the provider. roost.toml's context_window has the same bounds.
    err = error_of(base(model={"provider": "openai", "parameters": {"context_window": window}}))
    assert err.pointer == "/model/parameters/context_window", err
