"""The http plugin as a package: cheap to import, and loadable through its entry point."""

import subprocess
import sys

from roost.kernel import PluginManager


def test_importing_the_plugin_does_not_load_quart_or_hypercorn():
    code = (
        "import sys, roost.plugins.http\n"
        "print(sorted(m for m in ('quart', 'quart_trio', 'hypercorn', 'werkzeug') if m in sys.modules))"
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
