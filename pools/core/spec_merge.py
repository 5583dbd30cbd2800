"""A three-way merge of pool documents: what a lead changed in the edit form since the version
it was opened at (`base` → `mine`), put onto the version another change made meanwhile
(`base` → `theirs`), as `kubectl edit` puts a user's edit onto the object that changed under
it. The form then shows the merge to be saved again, instead of the lead's page, whose fields
the lead did not touch still held what the other change replaced: saving that page again
silently undid it.

Mappings merge key by key, down to the leaves (`nodeCount.min` and `nodeCount.max` are two
changes; a mapping one side lacks is an empty one), but for the scaling block (`ATOMIC`);
anything else (a list of taints, of teams, a value) is one value. Where both sides
changed the same value differently, the lead's wins and is reported as a conflict, so that the
page can say so beside the other change. Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_MISSING = object()  # the key is not in that document
# Mappings merged whole, as one value: a scaling block is one policy, its metrics and behaviour
# read together (Kubernetes marks such fields `x-kubernetes-map-type: atomic`).
ATOMIC = frozenset({"spec.scaling"})


@dataclass(frozen=True)
class Conflict:
    """A value both sides changed, differently: where, the lead's, and the one it replaces."""

    path: str
    mine: Any
    theirs: Any


def merge3(base: Any, mine: Any, theirs: Any) -> tuple[Any, list[Conflict]]:
    """The merged document and the values both sides changed differently (mine kept)."""
    return _merge(base, mine, theirs, "")


def _merge(base: Any, mine: Any, theirs: Any, path: str) -> tuple[Any, list[Conflict]]:
    if mine == base:
        return theirs, []
    if theirs == base or theirs == mine:
        return mine, []
    sides = (base, mine, theirs)
    mappings = all(isinstance(side, Mapping) or side is _MISSING for side in sides) and sum(side is _MISSING for side in sides) < 2
    if mappings and path not in ATOMIC:
        # A mapping one side lacks is an empty one (the form writes no empty mapping): labels
        # added on both sides to a pool that had none are two sets of keys, not one value each.
        base, mine, theirs = ({} if side is _MISSING else side for side in sides)
        merged, conflicts = {}, []
        for key in [*theirs, *(k for k in mine if k not in theirs)]:  # theirs' order, then what only mine has
            value, more = _merge(base.get(key, _MISSING), mine.get(key, _MISSING), theirs.get(key, _MISSING), f"{path}.{key}" if path else key)
            if value is not _MISSING:
                merged[key] = value
            conflicts += more
        return (merged if merged or _MISSING not in sides else _MISSING), conflicts
    return mine, [Conflict(path, None if mine is _MISSING else mine, None if theirs is _MISSING else theirs)]
