"""The commented templates `matrix-sources init` copies (shipped as package data)."""
