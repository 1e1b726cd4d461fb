"""The `!sources` command surface: parsing a command, answering it in a bounded pool,
rendering hits as a Matrix reply, `!sources status`, and editing replies whose quotes
were redacted. It searches through indexer/search/ and never writes the collection: what
it records of its replies goes through callables the service hands it."""
