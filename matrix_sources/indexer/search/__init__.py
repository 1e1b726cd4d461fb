"""Answering a query: the vector and lexical legs fused by rank, the lexical postings, and
what a person reads (the matched question, its answers, the lines to quote). Read-only
over the store: nothing here writes the event log or the collection."""
