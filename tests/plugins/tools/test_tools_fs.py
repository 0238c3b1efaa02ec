"""The file tools: read, write, edit, list, glob, grep — and the sandbox path checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from roost.kernel import (
    SandboxError,
    ToolArgumentsInvalid,
    ToolCall,
    ToolContext,
    validate_arguments,
)
from roost.plugins.tools import _sandbox, build_tools

TOOLS = {t.spec.name: t for t in build_tools()}


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """A workspace, the agent's temp dir, and a dir outside both."""
    workspace = tmp_path / "ws"
    temp = tmp_path / "tmp" / "tester"  # the agent's own temp dir, outside a kernel
    outside = tmp_path / "outside"
    for d in (workspace, temp, outside):
        d.mkdir(parents=True)
    monkeypatch.setattr(_sandbox, "_fallback_temp", tmp_path / "tmp")
    return workspace, temp, outside


def context(workspace: Path, sandbox: str = "sandbox", **kw) -> ToolContext:
    return ToolContext(agent="tester", workspace=workspace, sandbox=sandbox, **kw)


async def run(name: str, ctx: ToolContext, **arguments):
    tool = TOOLS[name]
    validate_arguments(tool.spec, arguments)
    return await tool.handler(ToolCall(name=name, arguments=arguments), ctx)


# ---- read -----------------------------------------------------------------------------


async def test_read_numbers_lines_and_pages(dirs):
    ws, _, _ = dirs
    (ws / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    result = await run("read", context(ws), path="f.txt")
    assert not result.is_error
    assert result.as_text().splitlines()[0] == "     1\tline 1"
    assert "    10\tline 10" in result.as_text()
    page = await run("read", context(ws), path="f.txt", offset=3, limit=2)
    lines = page.as_text().splitlines()
    assert lines[:2] == ["     3\tline 3", "     4\tline 4"]
    assert "read again with offset=5" in lines[2]


async def test_read_outside_the_agents_roots_is_refused_naming_the_grant(dirs):
    ws, temp, outside = dirs
    (outside / "o.txt").write_text("outside\n")
    (temp / "t.txt").write_text("temp\n")
    for path in (str(outside / "o.txt"), "../outside/o.txt"):
        with pytest.raises(SandboxError) as info:
            await run("read", context(ws), path=path)
        message = str(info.value)
        assert f"cannot read {path!r}" in message and str(outside / "o.txt") in message
        assert '"files.read"' in message
    # bash's $TMPDIR is a private tmpfs per command: no file tool's root.
    with pytest.raises(SandboxError, match="outside what agent 'tester' may read"):
        await run("read", context(ws), path=str(temp / "t.txt"))


async def test_read_refuses_binary_and_directories_and_missing(dirs):
    ws, _, _ = dirs
    (ws / "b.bin").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0rest")
    (ws / "d").mkdir()
    binary = await run("read", context(ws), path="b.bin")
    assert binary.is_error and "binary file" in binary.as_text()
    directory = await run("read", context(ws), path="d")
    assert directory.is_error and "use the list tool" in directory.as_text()
    missing = await run("read", context(ws), path="nope.txt")
    assert missing.is_error and "no such file or directory: 'nope.txt'" in missing.as_text()


async def test_read_empty_file_and_offset_past_the_end(dirs):
    ws, _, _ = dirs
    (ws / "empty").write_text("")
    (ws / "short").write_text("a\nb\n")
    assert "is empty" in (await run("read", context(ws), path="empty")).as_text()
    past = await run("read", context(ws), path="short", offset=10)
    assert "fewer than 10 lines" in past.as_text()


async def test_read_caps_long_lines_and_total_output(dirs):
    ws, _, _ = dirs
    (ws / "wide").write_text("x" * 5000 + "\n" + "y\n" * 5000)
    result = await run("read", context(ws, max_output_chars=3000), path="wide")
    text = result.as_text()
    assert "[line truncated]" in text
    assert len(text) < 3000 + 200
    assert "read again with offset=" in text


async def test_read_of_a_huge_line_keeps_only_what_it_shows(dirs):
    """A sparse file of one 256 MiB "line" (text, then a hole of NUL bytes): read shows the
    first characters, truncated, from bounded chunks — never the whole line in memory —
    and the next page skips the rest of the line the same way."""
    import resource

    ws, _, _ = dirs
    path = ws / "sparse.txt"
    path.write_bytes(b"a" * 8192)
    os.truncate(path, 256 << 20)
    with path.open("ab") as f:
        f.write(b"\nsecond line\r\nlast without newline")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    first = (await run("read", context(ws), path="sparse.txt", limit=1)).as_text()
    rest = (await run("read", context(ws), path="sparse.txt", offset=2)).as_text()
    grew_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) // 1024
    assert first.startswith("     1\t" + "a" * 2000 + " … [line truncated]"), first[:100]
    assert "read again with offset=2" in first
    assert rest.splitlines() == ["     2\tsecond line", "     3\tlast without newline"], rest
    assert grew_mib < 64, f"read held {grew_mib} MiB"


async def test_read_handles_crlf_and_cut_lines_at_chunk_edges(dirs):
    ws, _, _ = dirs
    long = "é" * 3000  # 6,000 bytes: cut at MAX_LINE_CHARS characters, not bytes
    text = "one\r\n" + long + "\n" + "x" * 70_000 + "\nend\n"
    (ws / "mixed.txt").write_text(text, encoding="utf-8", newline="")
    lines = (await run("read", context(ws), path="mixed.txt")).as_text().splitlines()
    assert lines[0] == "     1\tone"
    assert lines[1] == "     2\t" + "é" * 2000 + " … [line truncated]"
    assert lines[2] == "     3\t" + "x" * 2000 + " … [line truncated]"
    assert lines[3:] == ["     4\tend"]


async def test_read_does_not_follow_symlinks_out_or_in(dirs):
    ws, _, outside = dirs
    (outside / "target.txt").write_text("via link\n")
    (ws / "inside.txt").write_text("inside\n")
    (ws / "out.txt").symlink_to(outside / "target.txt")
    (ws / "in.txt").symlink_to("inside.txt")
    (ws / "dir").symlink_to(outside, target_is_directory=True)
    for path in ("out.txt", "in.txt", "dir/target.txt"):
        with pytest.raises(SandboxError, match="is a symbolic link; the file tools do not follow"):
            await run("read", context(ws), path=path)


# ---- write ----------------------------------------------------------------------------


async def test_write_creates_parents_and_reports(dirs):
    ws, _, _ = dirs
    result = await run("write", context(ws), path="a/b/c.txt", content="one\ntwo\n")
    assert not result.is_error
    assert (ws / "a/b/c.txt").read_text() == "one\ntwo\n"
    assert "created a/b/c.txt (8 bytes, 2 lines)" in result.as_text()
    again = await run("write", context(ws), path="a/b/c.txt", content="")
    assert "overwrote" in again.as_text() and (ws / "a/b/c.txt").read_text() == ""


async def test_write_into_bashs_temp_dir_is_refused(dirs):
    """The directory bash's private $TMPDIR is mounted on is no file tool's root."""
    ws, temp, _ = dirs
    with pytest.raises(SandboxError, match="outside what agent 'tester' may write"):
        await run("write", context(ws), path=str(temp / "scratch.txt"), content="ok")
    assert not (temp / "scratch.txt").exists()


@pytest.mark.parametrize("path", ["../outside/evil.txt", "sub/../../outside/evil.txt"])
async def test_write_traversal_out_of_the_workspace_is_refused(dirs, path):
    ws, _, outside = dirs
    with pytest.raises(SandboxError) as info:
        await run("write", context(ws), path=path, content="x")
    message = str(info.value)
    assert f"cannot write {path!r}" in message
    assert str(outside / "evil.txt") in message
    assert "outside what agent 'tester' may write" in message and '"files.write"' in message
    assert not (outside / "evil.txt").exists()


async def test_write_absolute_path_outside_is_refused(dirs):
    ws, _, outside = dirs
    with pytest.raises(SandboxError):
        await run("write", context(ws), path=str(outside / "abs.txt"), content="x")
    assert not (outside / "abs.txt").exists()


async def test_write_to_etc_is_refused_with_the_real_temp_dir(tmp_path):
    # No monkeypatching here: the real temp-dir allowance still does not cover /etc.
    with pytest.raises(SandboxError, match="/etc/roost_should_fail"):
        await run("write", context(tmp_path), path="/etc/roost_should_fail", content="x")
    assert not os.path.exists("/etc/roost_should_fail")


async def test_symlink_dir_pointing_out_of_the_workspace_is_refused(dirs):
    ws, _, outside = dirs
    (ws / "escape").symlink_to(outside, target_is_directory=True)
    with pytest.raises(SandboxError, match="escape is a symbolic link"):
        await run("write", context(ws), path="escape/pwned.txt", content="x")
    assert not (outside / "pwned.txt").exists()


async def test_dangling_symlink_file_pointing_out_is_refused(dirs):
    ws, _, outside = dirs
    (ws / "innocent.txt").symlink_to(outside / "created-through-link.txt")
    with pytest.raises(SandboxError, match="innocent.txt is a symbolic link"):
        await run("write", context(ws), path="innocent.txt", content="x")
    assert not (outside / "created-through-link.txt").exists()


async def test_read_only_mode_refuses_every_write(dirs):
    ws, temp, _ = dirs
    (ws / "f.txt").write_text("keep\n")
    for path in ("new.txt", str(temp / "t.txt")):
        with pytest.raises(SandboxError, match="read-only mode"):
            await run("write", context(ws, "read-only"), path=path, content="x")
    with pytest.raises(SandboxError, match="read-only mode"):
        await run("edit", context(ws, "read-only"), path="f.txt", old_string="keep", new_string="x")
    assert (ws / "f.txt").read_text() == "keep\n"
    assert "keep" in (await run("read", context(ws, "read-only"), path="f.txt")).as_text()


async def test_rwx_mode_writes_anywhere(dirs):
    ws, _, outside = dirs
    await run("write", context(ws, "rwx"), path="../outside/free.txt", content="yes")
    assert (outside / "free.txt").read_text() == "yes"


async def test_unknown_sandbox_mode_is_refused(dirs):
    ws, _, _ = dirs
    with pytest.raises(SandboxError, match="unknown sandbox mode 'yolo'"):
        await run("write", context(ws, "yolo"), path="x", content="x")


async def test_write_to_a_directory_path_is_an_error(dirs):
    ws, _, _ = dirs
    (ws / "d").mkdir()
    result = await run("write", context(ws), path="d", content="x")
    assert result.is_error and "is a directory" in result.as_text()


# ---- edit -----------------------------------------------------------------------------


async def test_edit_replaces_exactly_one_occurrence(dirs):
    ws, _, _ = dirs
    (ws / "code.py").write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    result = await run(
        "edit", context(ws), path="code.py", old_string="return 2", new_string="return 3"
    )
    assert not result.is_error
    assert (ws / "code.py").read_text().endswith("return 3\n")
    assert "replaced 1 occurrence in code.py; around line 5" in result.as_text()
    assert "     5\t    return 3" in result.as_text()


async def test_edit_ambiguous_match_names_lines(dirs):
    ws, _, _ = dirs
    (ws / "x.txt").write_text("a = 1\nb = 2\na = 1\n")
    result = await run("edit", context(ws), path="x.txt", old_string="a = 1", new_string="a = 9")
    assert result.is_error
    assert "occurs 2 times" in result.as_text() and "lines 1, 3" in result.as_text()
    assert (ws / "x.txt").read_text() == "a = 1\nb = 2\na = 1\n"
    done = await run(
        "edit", context(ws), path="x.txt", old_string="a = 1", new_string="a = 9", replace_all=True
    )
    assert "replaced 2 occurrences" in done.as_text()
    assert (ws / "x.txt").read_text() == "a = 9\nb = 2\na = 9\n"


async def test_edit_not_found_explains_and_hints_at_whitespace(dirs):
    ws, _, _ = dirs
    (ws / "x.txt").write_text("    indented\n")
    result = await run("edit", context(ws), path="x.txt", old_string="nothing", new_string="y")
    assert result.is_error and "was not found" in result.as_text()
    hinted = await run(
        "edit", context(ws), path="x.txt", old_string="\tindented\n\n", new_string="y"
    )
    assert "leading/trailing whitespace" in hinted.as_text()


async def test_edit_refuses_noop_missing_and_binary(dirs):
    ws, _, _ = dirs
    (ws / "b.bin").write_bytes(b"a\0b")
    with pytest.raises(ToolArgumentsInvalid, match="identical to old_string"):
        await run("edit", context(ws), path="x", old_string="a", new_string="a")
    missing = await run("edit", context(ws), path="nope", old_string="a", new_string="b")
    assert missing.is_error and "does not exist; use write" in missing.as_text()
    binary = await run("edit", context(ws), path="b.bin", old_string="a", new_string="b")
    assert binary.is_error and "binary" in binary.as_text()


async def test_edit_refuses_a_file_over_its_size_limit_without_reading_it(dirs):
    from roost.plugins.tools._fs import MAX_EDIT_BYTES

    ws, _, _ = dirs
    path = ws / "big.txt"
    path.write_text("needle\n")
    os.truncate(path, MAX_EDIT_BYTES + 1)  # sparse: no disk, and nothing is read
    result = await run("edit", context(ws), path="big.txt", old_string="needle", new_string="pin")
    assert result.is_error and "over edit's limit of 10 MiB" in result.as_text(), result.as_text()
    assert path.read_bytes()[:6] == b"needle"


async def test_edit_through_symlink_out_of_the_workspace_is_refused(dirs):
    ws, _, outside = dirs
    (outside / "target.txt").write_text("secret = 1\n")
    (ws / "link.txt").symlink_to(outside / "target.txt")
    with pytest.raises(SandboxError):
        await run("edit", context(ws), path="link.txt", old_string="1", new_string="2")
    assert (outside / "target.txt").read_text() == "secret = 1\n"


# ---- list -----------------------------------------------------------------------------


async def test_list_shows_dirs_files_symlinks_and_hides_dotfiles(dirs):
    ws, _, _ = dirs
    (ws / "src").mkdir()
    (ws / "a.txt").write_text("12345")
    (ws / ".hidden").write_text("")
    (ws / "ln").symlink_to("a.txt")
    text = (await run("list", context(ws))).as_text()
    assert text.splitlines()[0] == ".: 3 entries"
    assert "src/" in text and "a.txt  (5 bytes)" in text and "ln -> a.txt" in text
    assert ".hidden" not in text
    assert ".hidden" in (await run("list", context(ws), include_hidden=True)).as_text()


async def test_list_errors(dirs):
    ws, _, _ = dirs
    (ws / "f").write_text("")
    assert "no such directory" in (await run("list", context(ws), path="nope")).as_text()
    assert "is a file" in (await run("list", context(ws), path="f")).as_text()


# ---- glob -----------------------------------------------------------------------------


async def test_glob_recursive_pattern(dirs):
    ws, _, _ = dirs
    for rel in ("a.py", "pkg/b.py", "pkg/deep/c.py", "pkg/d.txt", ".git/x.py"):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text("")
    text = (await run("glob", context(ws), pattern="**/*.py")).as_text()
    assert text.splitlines() == ["a.py", "pkg/b.py", "pkg/deep/c.py"]
    sub = (await run("glob", context(ws), pattern="*.txt", path="pkg")).as_text()
    assert sub == "d.txt"
    none = (await run("glob", context(ws), pattern="*.rs")).as_text()
    assert "no matches for '*.rs'" in none


async def test_glob_refuses_an_absolute_pattern(dirs):
    ws, _, _ = dirs
    with pytest.raises(ToolArgumentsInvalid, match="arguments.pattern: must be relative"):
        await run("glob", context(ws), pattern="/etc/*")


@pytest.mark.parametrize("nul_at", [0, 8191, 8192])
async def test_read_edit_and_grep_agree_on_which_file_is_binary(dirs, nul_at):
    # One rule for the three: a NUL in the first 8 KiB makes a file binary, one past it not.
    ws, _, _ = dirs
    data = bytearray(b"x" * 8300 + b"\nneedle\n")
    data[nul_at] = 0
    (ws / "f").write_bytes(bytes(data))
    binary = nul_at < 8192
    read = await run("read", context(ws), path="f")
    grep = await run("grep", context(ws), pattern="needle")
    edit = await run("edit", context(ws), path="f", old_string="needle", new_string="pin")
    assert read.is_error is binary and ("binary file" in read.as_text()) is binary
    assert ("f:2: needle" in grep.as_text()) is not binary
    assert edit.is_error is binary and (b"pin" in (ws / "f").read_bytes()) is not binary


# ---- grep -----------------------------------------------------------------------------


@pytest.fixture
def tree(dirs):
    ws, _, _ = dirs
    files = {
        "app.py": "import os\nTODO = 'fix me'\nprint('todo later')\n",
        "lib/util.py": "def todo():\n    pass  # TODO: remove\n",
        "lib/notes.md": "TODO: write docs\n",
        "data.bin": "TODO\0binary",
        ".git/config": "TODO in git\n",
    }
    for rel, content in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(content)
    return ws


async def test_grep_finds_lines_with_paths_and_numbers(tree):
    text = (await run("grep", context(tree), pattern=r"TODO")).as_text()
    lines = text.splitlines()
    assert "app.py:2: TODO = 'fix me'" in lines
    assert "lib/util.py:2:     pass  # TODO: remove" in lines
    assert "lib/notes.md:1: TODO: write docs" in lines
    assert not any(line.startswith((".git", "data.bin")) for line in lines)
    assert lines[-1] == "[3 matches in 3 files]"


async def test_grep_glob_case_and_limits(tree):
    only_py = (await run("grep", context(tree), pattern="TODO", glob="*.py")).as_text()
    assert "notes.md" not in only_py and "app.py:2" in only_py
    nested = (await run("grep", context(tree), pattern="TODO", glob="lib/**/*.md")).as_text()
    assert nested.splitlines()[0] == "lib/notes.md:1: TODO: write docs"
    folded = (await run("grep", context(tree), pattern="todo", case_insensitive=True)).as_text()
    assert "app.py:3: print('todo later')" in folded
    capped = (await run("grep", context(tree), pattern="TODO", max_matches=1)).as_text()
    assert "stopped: reached max_matches=1" in capped
    one_file = (await run("grep", context(tree), pattern="TODO", path="lib/util.py")).as_text()
    assert one_file.splitlines()[0] == "util.py:2:     pass  # TODO: remove"


async def test_grep_invalid_regex_names_the_argument(tree):
    with pytest.raises(ToolArgumentsInvalid, match="arguments.pattern: invalid regular expression"):
        await run("grep", context(tree), pattern="(unclosed")


async def test_grep_reads_a_small_file_without_a_buffer_of_the_size_cap(dirs):
    """grep read each file with one ``read(MAX_GREP_FILE_BYTES + 1)``, which allocates the
    whole 10 MiB cap for a 600-byte file: on a tree of small files that cost more CPU than
    the search itself. Files are read in bounded chunks instead."""
    import tracemalloc

    from roost.plugins.tools import _fs

    ws, _, _ = dirs
    for i in range(5):
        (ws / f"f{i}.txt").write_text("some text line here\n" * 30)
    tracemalloc.start()
    try:
        found = (await run("grep", context(ws), pattern="text")).as_text()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "[150 matches in 5 files]" in found, found
    assert peak < _fs.MAX_GREP_FILE_BYTES // 4, f"grep allocated {peak >> 20} MiB"


async def test_grep_no_matches_and_missing_root(tree):
    none = (await run("grep", context(tree), pattern="zzz")).as_text()
    assert none.startswith("no matches for 'zzz'")
    missing = await run("grep", context(tree), pattern="x", path="nope")
    assert missing.is_error


# ---- bad input through the specs ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "needle"),
    [
        ("read", {"path": 5}, "arguments.path"),
        ("read", {"path": "a", "offset": 0}, "arguments.offset"),
        ("write", {"path": "a"}, "'content' is a required property"),
        ("edit", {"path": "a", "old_string": "", "new_string": "b"}, "arguments.old_string"),
        ("grep", {"pattern": "x", "max_matches": "10"}, "arguments.max_matches"),
        ("list", {"bogus": True}, "Additional properties"),
    ],
)
def test_bad_arguments_are_refused_by_the_schema(name, arguments, needle):
    with pytest.raises(ToolArgumentsInvalid, match=needle):
        validate_arguments(TOOLS[name].spec, arguments)


@pytest.mark.parametrize(
    ("name", "arguments", "needle"),
    [
        ("read", {"path": "a\0b"}, "NUL"),
        ("read", {"path": ""}, "arguments.path"),
        ("read", {"path": "a", "limit": True}, "arguments.limit"),
        ("write", {"path": "a", "content": 5}, "arguments.content"),
        ("list", {"include_hidden": "yes"}, "arguments.include_hidden"),
    ],
)
async def test_handlers_check_arguments_even_without_the_kernel(dirs, name, arguments, needle):
    ws, _, _ = dirs
    with pytest.raises(ToolArgumentsInvalid, match=needle):
        await TOOLS[name].handler(ToolCall(name=name, arguments=arguments), context(ws))


async def test_whole_numbers_sent_as_floats_page_as_integers(dirs):
    """JSON Schema counts 2.0 as an integer, so the schema lets it through: the tools must
    not echo it back as "2.0" in the line numbers and hints an agent pages by."""
    ws, _, _ = dirs
    (ws / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    page = (await run("read", context(ws), path="f.txt", offset=2.0, limit=2.0)).as_text()
    assert page.splitlines()[-1] == "[showing lines 2-3; more follow — read again with offset=4]"
    past = (await run("read", context(ws), path="f.txt", offset=20.0)).as_text()
    assert "fewer than 20 lines" in past and "20.0" not in past, past
    found = (await run("grep", context(ws), pattern="line", max_matches=1.0)).as_text()
    assert found.endswith("stopped: reached max_matches=1]"), found


def test_symlink_swapped_in_after_the_check_is_not_followed(dirs):
    from roost.plugins.tools import _fs

    ws, _, outside = dirs
    located = _sandbox.Located(ws.resolve(), "report.txt", ws.resolve() / "report.txt")
    # It passed the check as a plain file path, then became a link pointing out.
    (ws / "report.txt").symlink_to(outside / "stolen.txt")
    with pytest.raises(SandboxError, match="is a symbolic link"):
        _fs._open_for_write(located, "report.txt")
    assert not (outside / "stolen.txt").exists()


# ---- only regular files, checked on the opened descriptor --------------------------------


async def test_edit_and_write_refuse_a_hard_link_and_leave_the_other_name_alone(dirs):
    ws, _, outside = dirs
    (outside / "secret.txt").write_text("secret = 1\n")
    os.link(outside / "secret.txt", ws / "hard.txt")
    edited = await run("edit", context(ws), path="hard.txt", old_string="1", new_string="2")
    written = await run("write", context(ws), path="hard.txt", content="PWNED")
    for result, verb in ((edited, "edit"), (written, "write")):
        assert result.is_error and f"cannot {verb} 'hard.txt': it has 2 hard links" in (
            result.as_text()
        ), result.as_text()
    assert (outside / "secret.txt").read_text() == "secret = 1\n"


async def test_a_fifo_is_refused_by_read_edit_and_write_without_blocking(dirs):
    ws, _, _ = dirs
    os.mkfifo(ws / "pipe")
    reader = os.open(ws / "pipe", os.O_RDONLY | os.O_NONBLOCK)  # so a writer's open succeeds
    try:
        results = {
            "read": await run("read", context(ws), path="pipe"),
            "edit": await run("edit", context(ws), path="pipe", old_string="a", new_string="b"),
            "write": await run("write", context(ws), path="pipe", content="into the pipe"),
        }
        for verb, result in results.items():
            does = "write" if verb == "write" else "open"
            expected = f"it is a named pipe (FIFO); the file tools {does} regular files only"
            assert result.is_error and expected in result.as_text(), (verb, result.as_text())
        assert os.read(reader, 100) == b""  # nothing was written into it (no writer left)
    finally:
        os.close(reader)


async def test_rwx_mode_still_refuses_a_character_device(dirs):
    ws, _, _ = dirs
    read = await run("read", context(ws, "rwx"), path="/dev/zero")
    edit = await run("edit", context(ws, "rwx"), path="/dev/null", old_string="a", new_string="b")
    write = await run("write", context(ws, "rwx"), path="/dev/null", content="x")
    for result in (read, edit, write):
        assert result.is_error and "it is a character device" in result.as_text(), result.as_text()
