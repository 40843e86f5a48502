"""Benchmarks for the tool-using strategies: Game of 24, the LLMCompiler JSON sets, a synthetic DAG."""
