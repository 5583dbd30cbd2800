"""Usage records' labels, each distinct set stored once (`LabelSet`, issue 23).

A set's id is its content's: the first 128 bits of the SHA-256 of its JSON with sorted keys, as
a UUID. So every writer names a set without a query, equal sets built apart (in another part of
the hour, another hour, another key order) are one row, and an hour's records name their sets
before anyone knows which sets are new. An hour of a 1,000-pool fleet carries ~4,700 sets,
nearly all of them the hour before's: storing them is one read, and an insert of the new ones.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable

from billing.bulk_insert import Unsaved
from billing.models import LabelSet

_new_label_set = Unsaved(LabelSet)
# Ids asked for in one query: SQLite's limit on a statement's variables is 32,766.
_READ_CHUNK = 10_000


def label_set_id(labels: dict) -> uuid.UUID:
    """The id of the set `labels` (whatever the order of its keys)."""
    text = json.dumps(labels, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return uuid.UUID(bytes=hashlib.sha256(text.encode()).digest()[:16])


class LabelSets:
    """The label sets of one metered hour (or part), each an unsaved `LabelSet`, found by the
    identity of the dict: metering gives the records that carry the same labels one dict (a
    pool's nodes, a workload's replicas), so each dict is hashed once. The dicts are held here,
    so no id of one is reused by another while the hour is collected."""

    def __init__(self) -> None:
        self._by_identity: dict[int, tuple[dict, LabelSet]] = {}

    def of(self, labels: dict) -> LabelSet:
        found = self._by_identity.get(id(labels))
        if found is None:
            found = self._by_identity[id(labels)] = (labels, _new_label_set(id=label_set_id(labels), labels=labels))
        return found[1]

    def __iter__(self):
        return (label_set for _, label_set in self._by_identity.values())


def label_sets_store(sets: Iterable[LabelSet]) -> int:
    """Store the sets not stored yet; returns how many were new.

    Call it before the transaction that writes the records naming them (`meter_hour` does): a
    new set is then committed at once, so two writers adding the same new set wait for each
    other for one statement, not for the rest of each other's hour. New sets go in id order, so
    writers that wait for each other wait in one order, never in a cycle. A set stored for an
    hour that then fails is kept: another hour names it again, and it is never changed."""
    by_id = {label_set.pk: label_set for label_set in sets}
    ids = sorted(by_id)
    stored: set[uuid.UUID] = set()
    for start in range(0, len(ids), _READ_CHUNK):
        stored.update(LabelSet.objects.filter(pk__any_of=ids[start : start + _READ_CHUNK]).values_list("pk", flat=True))
    new = [by_id[pk] for pk in ids if pk not in stored]
    LabelSet.objects.bulk_create(new, ignore_conflicts=True)
    return len(new)
