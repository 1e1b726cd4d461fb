import pytest

from .harness import Stack, make_stack


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
