"""The order scripts/test.sh's workers take the modules in: longest measured first, each module's tests in order."""

from pathlib import Path
from types import SimpleNamespace

from tests import longest_first


def test_modules_go_longest_first_and_keep_their_own_order(monkeypatch) -> None:
    monkeypatch.setattr(longest_first, "module_seconds", lambda: {"test_a": 5.0, "test_b": 90.0})
    items = [SimpleNamespace(path=Path(f"tests/{module}.py"), name=name)
             for module, name in [("test_a", "1"), ("test_a", "2"), ("test_new", "1"), ("test_b", "1"), ("test_b", "2")]]
    ordered = [(item.path.stem, item.name) for item in longest_first.longest_first(items)]
    assert ordered == [("test_b", "1"), ("test_b", "2"), ("test_a", "1"), ("test_a", "2"), ("test_new", "1")]


def test_the_measured_run_lists_the_long_modules() -> None:
    seconds = longest_first.module_seconds()
    assert seconds["test_tinker"] > seconds["test_algorithms"] > 0
