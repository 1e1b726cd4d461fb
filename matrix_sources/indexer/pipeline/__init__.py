"""Pending events to vectors: cut a timeline into windows, embed them, upsert them, run in
the background (worker) and rebuild or verify the collection. It takes only what ingest/
admitted, through the event log; it never reads a homeserver."""
