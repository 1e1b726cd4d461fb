"""`matrix-sources` and its subcommands (main.py: the parser). Each is a thin front: the
work is done by indexer/ and appservice/homeserver/; nothing here is imported by the
running service."""
