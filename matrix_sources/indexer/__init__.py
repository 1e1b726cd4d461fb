"""The indexing side of matrix-sources: everything that is not Matrix networking.

Nothing in this package imports mautrix. It works over plain typed records
(`indexer.records`), so the whole ingest path can be driven from a JSONL export,
a test or a benchmark without a homeserver.
"""
