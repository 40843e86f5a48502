"""Benchmarks for the tool-using strategies (LLMCompiler, ReAct): Game of 24, the LLMCompiler JSON sets, a synthetic DAG."""
