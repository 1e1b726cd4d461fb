"""matrix-sources: a Matrix application service that makes a community's public
rooms searchable by meaning (appservice/: Matrix; indexer/: no Matrix library;
config/: the templates `init` copies)."""
