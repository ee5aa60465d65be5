"""Words of a job script's command lines: every value quoted, except a `ShellWord`, which only
the launch stage makes (a variable of the script or the allocation, never a grid value)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence


class ShellWord(str):
    """A value the job script must leave to the shell to expand (a variable of the
    allocation or the script); only the launch stage makes them, never from a grid value."""


def shell_join(words: Sequence[str]) -> str:
    """A command line: every word quoted except a ShellWord."""
    return " ".join(w if isinstance(w, ShellWord) else shlex.quote(w) for w in words)


def concat(*parts: str) -> str:
    """One word of several parts; a ShellWord when any part is one (the others quoted)."""
    if any(isinstance(p, ShellWord) for p in parts):
        return ShellWord("".join(p if isinstance(p, ShellWord) else shlex.quote(p)
                                 for p in parts))
    return "".join(parts)
