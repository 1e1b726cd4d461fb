"""How hard a property test tries. The full run (no -m, as CI runs it) and `-m slow` run
every property test at the strength its module names; any other marker selection, the
fast suite, runs a quarter of the examples (at least 10), so that it stays a quick loop
while CI keeps the full search. tests/conftest.py sets FULL before any test module loads."""

FULL = True


def examples(n: int) -> int:
    return n if FULL else max(10, n // 4)
