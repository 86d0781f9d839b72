"""A mock vLLM-style model server for tests and benchmarks (see server.py)."""
