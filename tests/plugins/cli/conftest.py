import importlib.util
import sys
from pathlib import Path

import pytest


def _load_fakes():
    # The fake kernel lives beside the HTTP tests; load it by path (the test folders are
    # not packages) and share one module object between both folders.
    if "http_fakes" in sys.modules:
        return sys.modules["http_fakes"]
    path = Path(__file__).parents[1] / "http" / "http_fakes.py"
    spec = importlib.util.spec_from_file_location("http_fakes", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["http_fakes"] = module
    spec.loader.exec_module(module)
    return module


fakes = _load_fakes()


@pytest.fixture
def fake_config(tmp_path):
    """``fake_config(**http_settings)`` → a config whose home is a temp directory."""

    def make(**http):
        return fakes.FakeConfig(home=tmp_path / "home", http=fakes.FakeHttpConfig(**http))

    return make
