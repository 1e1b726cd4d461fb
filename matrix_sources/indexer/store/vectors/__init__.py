"""The vector store: Chroma collections of windows (vectors, ids, metadata; no text),
split into segments, copied into fresh generations when compacted."""
