"""The ``roost.kernel`` package: its public names load their modules on first use."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import roost.kernel as kernel

INIT = Path(kernel.__file__)


def _type_checking_imports() -> dict[str, tuple[str, str]]:
    """The names the ``if TYPE_CHECKING:`` block imports: name → (module, name there)."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "_typing.TYPE_CHECKING"
    )
    names: dict[str, tuple[str, str]] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        for alias in node.names:
            if node.module is None:  # ``from . import _jsonrpc as jsonrpc``: the module itself
                names[alias.asname or alias.name] = (alias.name, "")
            else:
                names[alias.asname or alias.name] = (node.module, alias.name)
    return names


def test_the_static_imports_the_lazy_table_and_all_name_the_same_things():
    static = _type_checking_imports()
    assert static == kernel._public()
    assert sorted(kernel.__all__) == sorted(static)
    assert len(set(kernel.__all__)) == len(kernel.__all__)


@pytest.mark.parametrize("name", kernel.__all__)
def test_each_public_name_is_the_object_of_its_module(name):
    module_name, attribute = kernel._public()[name]
    module = sys.modules.get(f"roost.kernel.{module_name}") or __import__(
        f"roost.kernel.{module_name}", fromlist=["_"]
    )
    expected = getattr(module, attribute) if attribute else module
    assert getattr(kernel, name) is expected


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="'roost.kernel' has no attribute 'Kernal'"):
        kernel.Kernal  # noqa: B018
    with pytest.raises(ImportError, match="Kernal"):
        exec("from roost.kernel import Kernal", {})


def test_dir_lists_the_public_names_and_no_stray_helpers():
    listed = set(dir(kernel))
    assert set(kernel.__all__) <= listed
    assert not {"importlib", "functools", "typing", "annotations", "TYPE_CHECKING", "Any"} & listed


def test_a_module_failing_with_attribute_error_is_an_import_error_with_its_cause(monkeypatch):
    # What broke: Python reports an AttributeError from __getattr__ as "cannot import
    # name", with no cause, so a module's own bug was hidden.
    monkeypatch.delitem(sys.modules, "roost.kernel._netguard", raising=False)
    monkeypatch.delitem(vars(kernel), "check_url", raising=False)
    real_import = __import__("importlib").import_module

    def broken(name, package=None):
        if name == "._netguard":
            raise AttributeError("module 'ipaddress' has no attribute 'ip_address'")
        return real_import(name, package)

    monkeypatch.setattr(kernel._importlib, "import_module", broken)
    with pytest.raises(
        ImportError, match="loading roost.kernel._netguard failed.*ip_address"
    ) as caught:
        exec("from roost.kernel import check_url", {})
    assert isinstance(caught.value.__cause__, AttributeError)


def _modules_after(code: str) -> list[str]:
    """The heavy modules loaded by ``code`` in a fresh interpreter."""
    heavy = [
        "jsonschema",
        "cattrs",
        "sqlite3",
        "importlib.metadata",
        "roost.kernel._kernel",
        "roost.kernel._manifest",
        "roost.kernel._policy",
        "roost.kernel._loop",
        "roost.kernel._store",
    ]
    script = f"import sys\n{code}\nprint(','.join(m for m in {heavy!r} if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return [m for m in result.stdout.strip().split(",") if m]


def test_importing_the_package_loads_none_of_the_kernel():
    assert _modules_after("import roost.kernel") == []


def test_a_light_name_loads_only_its_own_module():
    assert _modules_after("from roost.kernel import jsonrpc, is_mapping, TraceContext") == []


def test_a_name_loads_its_module_when_used():
    assert "roost.kernel._kernel" in _modules_after("from roost.kernel import Kernel")


def test_ruff_refuses_every_private_kernel_module_outside_the_kernel():
    # A new kernel/_x.py without its banned-api entry would be importable by plugins.
    import tomllib

    pyproject = tomllib.loads((INIT.parent.parent / "pyproject.toml").read_text(encoding="utf-8"))
    lint = pyproject["tool"]["ruff"]["lint"]
    banned = lint["flake8-tidy-imports"]["banned-api"]
    modules = {f"roost.kernel.{p.stem}" for p in INIT.parent.glob("_*.py") if p.stem != "__init__"}
    assert "TID" in lint["select"] and set(banned) == modules
    for module, entry in banned.items():  # the public names it offers are that module's
        offered = entry["msg"].partition("import ")[2].rstrip("`")
        for name in filter(None, offered.split(", ")):
            assert name == "..." or kernel._public()[name][0] == module.rpartition(".")[2], module
