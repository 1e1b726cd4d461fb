"""Where the tests find the repository and their fixtures, wherever a test module sits."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
SHARED = ROOT.parent / "shared"
