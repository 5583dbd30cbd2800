"""Words of the messages people read (hints, Pending messages, findings). Pure: no Django."""

from __future__ import annotations


def plural(n: int, word: str) -> str:
    """`n` and `word`, the word in the plural unless n is 1 ("1 node", "2 nodes", "0 nodes")."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
