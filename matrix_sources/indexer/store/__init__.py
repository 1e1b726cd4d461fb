"""Where things are kept: the SQLite event log (the one home of text), the journal, the
Chroma collection of vectors, the writer lock and the compaction schedule. It keeps what
it is given and does not decide what may be indexed (ingest/) or how windows are cut
(pipeline/)."""

from .vectors import heapscrub  # noqa: F401 - freed memory overwritten before Chroma is used
