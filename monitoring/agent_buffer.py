"""The agent's on-disk report buffer: a small SQLite file that survives restarts (seed D1).

Reports are numbered here, in the same transaction that stores them, so a sequence number is
never used twice even if the agent is killed between two steps. The buffer is capped: when full,
the oldest reports are dropped (and the server is told where the buffer now starts, `oldestSeq`,
so it does not wait for them). Standard library only: the agent runs on the GPU node.

Reports the control plane refuses as bad input (HTTP 4xx naming them) go to the dead-letter
file beside the buffer (`reports.dead-letter.jsonl` next to `reports.sqlite3`), one JSON line
per report with the server's status and reason, and leave the buffer, so later reports flow.
An operator reads them there (`jq`), fixes the agent or the sensor, and may delete the file.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

logger = logging.getLogger("ebcloud.agent")


def dead_letter_path(buffer_path: str | Path) -> Path:
    """The dead-letter file of a buffer: beside it, `<name>.dead-letter.jsonl`."""
    path = Path(buffer_path)
    return path.with_name(f"{path.stem}.dead-letter.jsonl")


def dead_letter_count(buffer_path: str | Path) -> int:
    """How many reports the buffer's dead-letter file holds (0 without one)."""
    try:
        with open(dead_letter_path(buffer_path), "rb") as lines:
            return sum(1 for line in lines if line.strip())
    except FileNotFoundError:
        return 0


class DiskBuffer:
    def __init__(self, path: str | Path, *, cap: int = 10_000):
        if cap < 1:
            raise ValueError("cap must be at least 1")
        self.path, self.cap = Path(path), cap
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(
            """
            CREATE TABLE IF NOT EXISTS reports (seq INTEGER PRIMARY KEY, body TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
            CREATE TABLE IF NOT EXISTS acks (id INTEGER PRIMARY KEY, ok INTEGER NOT NULL, message TEXT NOT NULL);
            INSERT OR IGNORE INTO meta VALUES ('next_seq', 1);
            """
        )
        self.dropped = 0

    def close(self) -> None:
        self.db.close()

    def _next_seq(self) -> int:
        return self.db.execute("SELECT value FROM meta WHERE key='next_seq'").fetchone()[0]

    def start_after(self, acked_seq: int) -> None:
        """Number new reports after `acked_seq` (the server's, at join) if not already past it."""
        self.db.execute("UPDATE meta SET value=MAX(value, ?) WHERE key='next_seq'", (acked_seq + 1,))

    def append(self, report: dict) -> int:
        """Store a report under the next sequence number and return that number."""
        with self._tx():
            seq = self._next_seq()
            self.db.execute("INSERT INTO reports VALUES (?, ?)", (seq, json.dumps({**report, "seq": seq}, separators=(",", ":"))))
            self.db.execute("UPDATE meta SET value=? WHERE key='next_seq'", (seq + 1,))
            excess = self.db.execute("SELECT COUNT(*) FROM reports").fetchone()[0] - self.cap
            if excess > 0:
                self.db.execute("DELETE FROM reports WHERE seq IN (SELECT seq FROM reports ORDER BY seq LIMIT ?)", (excess,))
                self.dropped += excess
                logger.warning("report buffer full (%d): dropped the %d oldest report(s)", self.cap, excess)
        return seq

    def pending(self, limit: int) -> list[dict]:
        rows = self.db.execute("SELECT body FROM reports ORDER BY seq LIMIT ?", (limit,)).fetchall()
        return [json.loads(body) for (body,) in rows]

    def oldest_seq(self) -> int | None:
        return self.db.execute("SELECT MIN(seq) FROM reports").fetchone()[0]

    def __len__(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM reports").fetchone()[0]

    def drop_through(self, seq: int) -> None:
        """The server acknowledged every report up to `seq`: forget them."""
        self.db.execute("DELETE FROM reports WHERE seq <= ?", (seq,))

    @property
    def dead_letter_path(self) -> Path:
        return dead_letter_path(self.path)

    def dead_letter(self, reports: list[dict], *, status: int, reasons: dict[int, str]) -> int:
        """Move refused reports out of the buffer into the dead-letter file, each with the
        server's status and its reason (`reasons` by seq). Written and synced before they
        leave the buffer, so a crash in between keeps them (at worst twice). Returns how many."""
        if not reports:
            return 0
        at = datetime.now(UTC).isoformat()
        lines = "".join(
            json.dumps({"refusedAt": at, "status": status, "reason": reasons.get(r["seq"], ""), "report": r},
                       separators=(",", ":")) + "\n"
            for r in reports
        )
        with open(self.dead_letter_path, "a", encoding="utf-8") as out:
            out.write(lines)
            out.flush()
            os.fsync(out.fileno())
        self.db.executemany("DELETE FROM reports WHERE seq=?", [(r["seq"],) for r in reports])
        return len(reports)

    def dead_letter_count(self) -> int:
        return dead_letter_count(self.path)

    # Commands the agent ran and has not yet reported back.
    def ack_add(self, command_id: int, ok: bool, message: str) -> None:
        self.db.execute("INSERT OR IGNORE INTO acks VALUES (?, ?, ?)", (command_id, int(ok), message))

    def acks_clear_messages(self, ids: list[int]) -> None:
        """The server refused these acknowledgements' messages: send them without one (the
        command ran; forgetting the acknowledgement would run it again)."""
        self.db.executemany("UPDATE acks SET message='' WHERE id=?", [(i,) for i in ids])

    def acks(self) -> list[dict]:
        return [{"id": i, "ok": bool(ok), "message": m} for i, ok, m in self.db.execute("SELECT id, ok, message FROM acks ORDER BY id")]

    def acked_command(self, command_id: int) -> bool:
        return self.db.execute("SELECT 1 FROM acks WHERE id=?", (command_id,)).fetchone() is not None

    def acks_sent(self, ids: list[int]) -> None:
        self.db.executemany("DELETE FROM acks WHERE id=?", [(i,) for i in ids])

    def _tx(self):
        db = self.db

        class _Tx:
            def __enter__(self):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, exc_type, exc, tb):
                db.execute("COMMIT" if exc_type is None else "ROLLBACK")

        return _Tx()
