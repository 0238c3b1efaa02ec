import pytest
from http_fakes import FakeConfig, FakeHttpConfig, FakeKernel


@pytest.fixture
def make_kernel(tmp_path):
    """``make_kernel(**http_settings)`` → a FakeKernel whose home is a temp directory."""

    def make(agents=("echo", "coder"), **http) -> FakeKernel:
        return FakeKernel(FakeConfig(home=tmp_path / "home", http=FakeHttpConfig(**http)), agents)

    return make
