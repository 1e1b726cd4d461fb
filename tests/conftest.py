import pytest

from .harness import Stack, make_stack


def pytest_collection_modifyitems(config, items):
    """`slow` tests run in the full run (no -m) and when -m names them; a run picked by
    another marker expression (`-m "not synapse"`, the fast suite) leaves them out."""
    expr = config.option.markexpr
    if not expr or "slow" in expr:
        return
    slow = [i for i in items if i.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [i for i in items if not i.get_closest_marker("slow")]


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Stack:
    """A real Synapse with the generated registration and `matrix-sources run` with the
    real model, shared by the tests of one module."""
    s = make_stack(tmp_path_factory.mktemp("stack"))
    s.synapse.start()
    try:
        s.service.start()
        yield s
    finally:
        s.service.stop()
        s.synapse.stop()
