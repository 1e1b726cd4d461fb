"""The Matrix side of matrix-sources: transactions, intents, room state, commands,
replies and the command line. Everything that speaks Matrix lives here; the indexing
itself is in `indexer/`, which never imports mautrix."""
