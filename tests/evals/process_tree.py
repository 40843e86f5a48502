"""Live processes on this machine by parentage, read from /proc (zombies left out)."""

from __future__ import annotations

from pathlib import Path


def _stat(pid: str | int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses)."""
    return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()


def parent_of(pid: int) -> int:
    return int(_stat(pid)[1])


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` (children, their grading pools' workers and forkserver)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat(entry.name)
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found
