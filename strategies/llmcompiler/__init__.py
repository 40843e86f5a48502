"""LLMCompiler and its ReAct baseline, with tools as plugins (see docs/llmcompiler.md)."""

from strategies.llmcompiler.react import ReAct, ReActConfig
from strategies.llmcompiler.strategy import LLMCompiler, LLMCompilerConfig

__all__ = ["LLMCompiler", "LLMCompilerConfig", "ReAct", "ReActConfig"]
