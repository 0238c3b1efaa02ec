"""The http plugin as a package: cheap to import, and loadable through its entry point."""

import subprocess
import sys

from roost.kernel import PluginManager


def test_importing_the_plugin_does_not_load_quart_or_hypercorn():
    code = (
        "import sys, roost.plugins.http\n"
        "print(sorted(m for m in ('quart', 'quart_trio', 'hypercorn', 'werkzeug') "
        "if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_lazy_names_resolve():
    import roost.plugins.http as http

    assert callable(http.create_app) and callable(http.serve) and callable(http.open_daemon)
    assert set(http.__all__) <= set(dir(http)) | set(http._LAZY)


def test_http_entry_point_loads_as_a_plugin():
    pm = PluginManager()
    pm.load_entry_points()
    assert "http" in pm.loaded
    assert not [f for f in pm.failures if f.name == "http"]


def test_no_private_modules_of_dependencies_are_imported():
    """Regression: the daemon served through a copy of hypercorn's private ``worker_serve``
    (``TCPServer``, ``Lifespan``, ``WorkerContext``) and pinned hypercorn's minor version.
    Only the documented hypercorn API (``hypercorn.config``, ``hypercorn.trio``), and no
    underscored module of any dependency."""
    import ast
    import sys
    from pathlib import Path

    import roost.kernel
    import roost.plugins

    roots = [Path(roost.kernel.__file__).parent, Path(roost.plugins.__path__[0])]
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top == "roost" or top in sys.stdlib_module_names:
                        continue
                    private = any(part.startswith("_") for part in name.split(".")[1:])
                    if private or (
                        top == "hypercorn" and name not in ("hypercorn.config", "hypercorn.trio")
                    ):
                        found.append(f"{path.name}:{node.lineno} {name}")
    assert not found, found
