"""Search a local document store: a folder of .txt / .md / .json / .jsonl documents, BM25-ranked.

So HotpotQA / ParallelQA style questions run offline over documents the user provides.
A .txt or .md file is one document titled by its first heading or its file name; a .json
file holds a list of ``{"title", "text"}`` objects or a ``{title: text}`` mapping; a .jsonl
file holds one such object per line. ``lookup("Pluto")`` returns the best document's
opening paragraph, the way the paper's Wikipedia tool returns a first paragraph.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from paragen.errors import ConfigError
from strategies.llmcompiler.tools import ToolInputError, tool

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "that",
        "the",
        "to",
        "was",
        "were",
        "what",
        "which",
        "with",
    ]
)
_K1, _B, _TITLE_BOOST = 1.5, 0.75, 3.0


@dataclass(frozen=True)
class Document:
    title: str
    text: str


class LookupArgs(BaseModel):
    query: str = Field(min_length=1, description="what to look for, e.g. an entity name")
    k: int = Field(default=1, ge=1, le=5, description="how many documents to return")


@tool(
    "lookup",
    "lookup(query: str) -> str: finds the document that best matches the query in the local document "
    'store and returns its title and opening paragraph, e.g. lookup("Eiffel Tower").',
)
async def lookup(args: LookupArgs, *, root: str | None = None, max_chars: int = 600) -> str:
    if root is None:
        raise ToolInputError("lookup: no document store configured (tool option lookup.root)")
    hits = load_store(root).search(args.query, args.k)
    if not hits:
        return f"No document matches {args.query!r}."
    return "\n\n".join(f"{doc.title}: {_opening(doc.text, max_chars)}" for doc in hits)


def _opening(text: str, max_chars: int) -> str:
    paragraph = next((p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()), "")
    return paragraph if len(paragraph) <= max_chars else paragraph[:max_chars].rsplit(" ", 1)[0] + " ..."


def tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


class DocStore:
    """Documents with a BM25 index over their text and a boost for query words in the title."""

    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        self._terms = [Counter(tokens(d.text)) for d in documents]
        self._titles = [set(tokens(d.title)) for d in documents]
        self._lengths = [sum(c.values()) for c in self._terms]
        self._avg = sum(self._lengths) / max(1, len(documents))
        df: Counter[str] = Counter()
        for terms in self._terms:
            df.update(terms.keys())
        n = len(documents)
        self._idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def score(self, query: list[str], index: int) -> float:
        terms, length = self._terms[index], self._lengths[index]
        total = 0.0
        for word in query:
            tf = terms.get(word, 0)
            if tf:
                norm = tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * length / max(self._avg, 1e-9)))
                total += self._idf.get(word, 0.0) * norm
        overlap = len(self._titles[index] & set(query)) / max(1, len(set(query)))
        return total + _TITLE_BOOST * overlap

    def search(self, query: str, k: int = 1) -> list[Document]:
        words = tokens(query)
        if not words:
            return []
        scored = [(self.score(words, i), i) for i in range(len(self.documents))]
        ranked = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))
        return [self.documents[i] for _, i in ranked[:k]]


@functools.cache
def load_store(root: str) -> DocStore:
    """Read and index every document under ``root`` once per process."""
    path = Path(root)
    if not path.exists():
        raise ConfigError(
            f"lookup: no document store at {root!r}", hint="give a folder of .txt/.md/.json files"
        )
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    documents = [doc for file in files for doc in read_documents(file)]
    if not documents:
        raise ConfigError(f"lookup: no documents found under {root!r}")
    return DocStore(documents)


def read_documents(file: Path) -> list[Document]:
    suffix = file.suffix.lower()
    if suffix in (".txt", ".md"):
        text = file.read_text(encoding="utf-8", errors="replace")
        heading = re.match(r"\s*#+\s*(.+)", text)
        title = heading.group(1).strip() if heading else file.stem.replace("_", " ")
        body = text[heading.end() :] if heading else text
        return [Document(title, body.strip())]
    if suffix == ".json":
        return _from_json(json.loads(file.read_text(encoding="utf-8")))
    if suffix == ".jsonl":
        lines = file.read_text(encoding="utf-8").splitlines()
        return _from_json([json.loads(line) for line in lines if line.strip()])
    return []


def _from_json(data: Any) -> list[Document]:
    if isinstance(data, dict):
        return [Document(str(k), str(v)) for k, v in data.items()]
    if isinstance(data, list):
        return [
            Document(str(d.get("title", "")), str(d.get("text", ""))) for d in data if isinstance(d, dict)
        ]
    return []


__all__ = ["DocStore", "Document", "LookupArgs", "load_store", "lookup", "read_documents"]
