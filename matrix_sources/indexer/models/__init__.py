"""The models: the embedders the pipeline indexes with and the search asks with, and the
turns they take at the one model (people first)."""
