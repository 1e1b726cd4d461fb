"""Getting events in: parse raw Matrix events, judge them by the gate, append what passed
to the event log, apply edits and redactions, purge a room the gate now refuses; live,
backfill and import all come through here. Plain records only: never mautrix, never a
homeserver."""
