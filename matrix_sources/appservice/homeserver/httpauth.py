"""A request's token against ours, in constant time, for every endpoint that takes one
(the transactions, /ping, the user and alias queries, the search API).

aiohttp reads header bytes that are not UTF-8 as lone surrogates (`\\xff` -> U+DCFF), which
`str.encode()` refuses: such a token answered 500 with a traceback. It is a wrong token.
"""

from __future__ import annotations

import hmac


def same_token(given: str, ours: bytes) -> bool:
    """Whether `given` is our token. "surrogatepass" encodes any string: one holding a
    surrogate (header bytes that are not UTF-8) cannot equal a token of UTF-8 text, and is
    still compared in constant time."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), ours)
