"""The node agent (seed D1; design §4): `python -m monitoring.agent --server URL ...`.

It runs on every GPU node, reads the GPUs (NVML, or a simulated source), writes one report per
interval into its on-disk buffer and sends the buffer, oldest first, to the control plane's
agent API. The server answers with `ackedSeq` (every report up to it is stored) and the agent
forgets those. When the control plane is away the agent keeps measuring and buffering, retries
with exponential backoff and jitter, and replays in order when it is back: the node keeps
working and nothing is lost or counted twice (the server deduplicates by sequence number).

Network errors, 5xx and the 4xx answers that are about the moment rather than the batch (403,
404, 408, 409, 425, 429: a wrong URL, throttling) are retried. A 401 is not: the credential was
revoked (by an admin, or because another agent joined as this node) or the join token is spent,
and no retry can bring it back, as a kubelet whose client certificate was revoked cannot retry
its way back in. The agent stops with one line saying so and exits 3 (`CredentialRefused`),
instead of stalling silently on a node the control plane no longer hears from. Any
other 4xx refuses the batch itself (a 400 naming `reports[2].gpus[3].DCGM_FI_DEV_FB_USED`): sent
again it would be refused again and hold up every later report, so the reports it names (all
of the batch when it names none) move to the dead-letter file beside the buffer with the
server's reason, are counted (`deadLettered` in `--once`'s output, a warning in the log, and the
server's `ReportRejected` Warning event on the node), and the next batch goes out.

    python -m monitoring.agent --server http://cp:8000 --join-token abc123.0123456789abcdef \\
        --node train-pool-a-m-0 --buffer-dir /var/lib/ebcloud-agent
    python -m monitoring.agent --server http://cp:8000 --credential-file /var/lib/ebcloud-agent/credential.json

No Django here: the agent needs the standard library, httpx and (for real GPUs) pynvml.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from monitoring.agent_buffer import DiskBuffer, dead_letter_count, dead_letter_path
from monitoring.agent_sources import ControlPlaneFaults, GpuSource, SimulatedSource, source_open

logger = logging.getLogger("ebcloud.agent")
API = "/api/agent/v1"


class AgentError(Exception):
    """The control plane could not be reached, failed, or asked to wait; retry later."""


class CredentialRefused(Exception):
    """The control plane refused the agent's credential or join token (401). Not an AgentError:
    retrying cannot help, so the agent stops; a new join token is the way back."""


class BatchRefused(AgentError):
    """The control plane refused the request itself (a 4xx about its content): sending it again
    unchanged cannot succeed. `errors` are the server's `{"field", "message"}` items."""

    def __init__(self, message: str, *, status: int, errors: list[dict]):
        super().__init__(message)
        self.status, self.errors = status, errors


# 4xx answers about the moment or the route, not about what was sent: retried like a 5xx.
# A 401 is neither (CredentialRefused): the agent stops.
RETRIED_4XX = frozenset({403, 404, 408, 409, 425, 429})
EXIT_CREDENTIAL_REFUSED = 3
_REPORT_FIELD = re.compile(r"reports\[([0-9]+)\]")
_ACK_FIELD = re.compile(r"acks\[([0-9]+)\]")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # the server refuses these in text
ACK_MESSAGE_MAX = 500  # the server's limit


def backoff_delay(failures: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Exponential backoff with "equal jitter": half the step fixed, half random, so that a
    thousand agents coming back after an outage do not all knock at the same instant."""
    step = min(cap, base * 2 ** max(0, failures - 1))
    return step / 2 + rng.uniform(0, step / 2)


class Agent:
    def __init__(self, *, server: str, source: GpuSource, buffer: DiskBuffer, credential_file: str | Path,
                 node: str | None = None, join_token: str | None = None, interval: float = 15.0,
                 batch_size: int = 100, backoff_base: float = 1.0, backoff_cap: float = 60.0,
                 timeout: float = 10.0, seed: int | None = None):
        self.server = server.rstrip("/")
        self.source, self.buffer = source, buffer
        self.credential_file = Path(credential_file)
        self.node, self.join_token = node, join_token
        self.interval, self.batch_size = interval, batch_size
        self.backoff_base, self.backoff_cap = backoff_base, backoff_cap
        self.rng = random.Random(seed)
        self.http = httpx.Client(timeout=timeout)
        self.credential: str | None = None
        self.gpu_count: int | None = None  # the node's, as its join answered (a simulated source takes it)
        self.gpus_unsaved = False  # the credential file has no gpuCount: the first send rotates it, whose answer has it
        self.failures = 0
        self.produced = 0
        self.dead_lettered = 0
        self.refused: str | None = None  # why the control plane refused this agent, once it has
        self._load_credential()

    # --- identity -----------------------------------------------------------------------
    def _load_credential(self) -> None:
        if self.credential_file.exists():
            saved = json.loads(self.credential_file.read_text())
            if self.node and saved.get("node") != self.node:
                raise SystemExit(f"{self.credential_file} is for node {saved.get('node')}, not {self.node}")
            self.credential, self.node = saved["credential"], saved["node"]
            self._node_gpus(saved.get("gpuCount"))
            # Rotated once, only for a source that takes the node's count: a real one measures its GPUs.
            self.gpus_unsaved = "gpuCount" not in saved and getattr(self.source, "pinned", True) is False

    def _save_credential(self) -> None:
        self.credential_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.credential_file.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"server": self.server, "node": self.node, "credential": self.credential, "gpuCount": self.gpu_count}, out)
        os.replace(tmp, self.credential_file)

    def _post(self, path: str, body: dict, *, auth: bool = True) -> dict:
        headers = {"Authorization": f"Bearer {self.credential}"} if auth else {}
        try:
            response = self.http.post(self.server + API + path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise AgentError(f"{path}: {exc.__class__.__name__}: {exc}") from exc
        status = response.status_code
        if status >= 400:
            try:
                errors = [e for e in response.json()["errors"] if isinstance(e, dict)]
                message = "; ".join(f"{e['field']}: {e['message']}" if e.get("field") else str(e.get("message")) for e in errors)
            except (ValueError, KeyError, TypeError):
                errors, message = [], response.text[:200]
            text = f"{path}: HTTP {status}: {message}"
            if status == 401:
                raise CredentialRefused(text)
            if status < 500 and status not in RETRIED_4XX:
                raise BatchRefused(text, status=status, errors=errors)
            raise AgentError(text)
        try:
            body = response.json()
        except ValueError as exc:
            raise AgentError(f"{path}: HTTP {status}: the answer is not JSON") from exc
        if not isinstance(body, dict):
            raise AgentError(f"{path}: HTTP {status}: the answer is not a JSON object")
        return body

    def join(self) -> None:
        if self.credential:
            if self.gpus_unsaved:  # its credential file is from before joins answered gpuCount
                self.rotate()
            return
        if not (self.join_token and self.node):
            raise SystemExit("no credential file: --join-token and --node are needed to join")
        body = self._post("/join/", {"token": self.join_token, "node": self.node}, auth=False)
        self.credential = body["credential"]
        self._node_gpus(body.get("gpuCount"))
        self._save_credential()
        self.buffer.start_after(body.get("ackedSeq", 0))
        logger.info("joined as node %s", self.node)

    def _node_gpus(self, count) -> None:
        """The node's GPU count, which the control plane checks every report's GPU indices
        against: a simulated source not given `--gpus` simulates that many (it simulated 8,
        and a 2-GPU node had every report refused)."""
        if isinstance(count, int) and count > 0:
            self.gpu_count = count
            if hasattr(self.source, "adopt_node_gpus"):
                self.source.adopt_node_gpus(count)

    def rotate(self) -> None:
        body = self._post("/credential/rotate/", {})
        self.credential, self.gpus_unsaved = body["credential"], False
        self._node_gpus(body.get("gpuCount"))
        self._save_credential()

    # --- work ---------------------------------------------------------------------------
    def collect(self) -> int:
        """Measure once and buffer the report; returns its sequence number."""
        driver, cuda = self.source.versions()
        report = {"at": datetime.now(UTC).isoformat(), "driverVersion": driver, "cudaVersion": cuda,
                  "gpus": self.source.sample(), "xids": self.source.xids()}
        self.produced += 1
        return self.buffer.append(report)

    def flush(self) -> int:
        """Send the buffer oldest first until it is empty; returns the last ackedSeq."""
        self.join()
        acked = 0
        while True:
            reports = self.buffer.pending(self.batch_size)
            if not reports:
                return acked
            acks = self.buffer.acks()
            try:
                body = self._post("/reports/", {"reports": reports, "oldestSeq": reports[0]["seq"], "acks": acks,
                                                "sentAt": datetime.now(UTC).isoformat()})  # the server measures this clock's offset
            except BatchRefused as refused:
                self._dead_letter(reports, acks, refused)
                continue  # the rest of the buffer flows
            acked = body.get("ackedSeq")
            if type(acked) is not int:
                raise AgentError(f"/reports/: the answer has no ackedSeq: {str(body)[:200]}")
            self.buffer.drop_through(acked)
            self.buffer.acks_sent([a["id"] for a in acks])
            for command in body.get("commands", []):
                self._run_command(command)
            if acked < reports[0]["seq"]:  # none of it acknowledged: the server holds a gap; it will ask again
                return acked

    def _dead_letter(self, reports: list[dict], acks: list[dict], refused: BatchRefused) -> None:
        """Move what the server refused out of the way: the reports its errors name (every
        report of the batch when they name none, or something else), and the messages of
        acknowledgements it named (the acknowledgement itself stays: the command ran)."""
        named: dict[int, list[str]] = {}
        bad_acks: list[int] = []
        whole = not refused.errors
        for error in refused.errors:
            field = str(error.get("field") or "")
            line = f"{field}: {error.get('message')}" if field else str(error.get("message"))
            if (match := _REPORT_FIELD.match(field)) and int(match.group(1)) < len(reports):
                named.setdefault(int(match.group(1)), []).append(line)
            elif (match := _ACK_FIELD.match(field)) and int(match.group(1)) < len(acks) and acks[int(match.group(1))]["message"]:
                bad_acks.append(acks[int(match.group(1))]["id"])
            else:
                whole = True
        if bad_acks:
            self.buffer.acks_clear_messages(bad_acks)
        if whole or not (named or bad_acks):
            refused_reports, reasons = reports, {r["seq"]: str(refused) for r in reports}
        else:
            refused_reports = [reports[i] for i in sorted(named)]
            reasons = {reports[i]["seq"]: "; ".join(lines) for i, lines in named.items()}
        moved = self.buffer.dead_letter(refused_reports, status=refused.status, reasons=reasons)
        self.dead_lettered += moved
        logger.warning("%s; %d report(s) moved to the dead-letter file %s (%d there in all)",
                       refused, moved, self.buffer.dead_letter_path, self.buffer.dead_letter_count())

    def _run_command(self, command: dict) -> None:
        if self.buffer.acked_command(command["id"]):
            return
        try:
            ok, message = self.source.execute(command)
        except Exception as exc:  # noqa: BLE001 - report any failure back to the control plane
            ok, message = False, f"{exc.__class__.__name__}: {exc}"
        logger.info("command %s %s on GPU %s: %s", command["id"], command["action"], command.get("gpu"), message)
        # What the control plane accepts: no control characters but newline and tab, 500 at most.
        message = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(message))[:ACK_MESSAGE_MAX]
        self.buffer.ack_add(command["id"], ok, message)

    def run(self, stop: threading.Event, *, max_reports: int | None = None, exit_when_drained: bool = False) -> None:
        """Measure every `interval` and send; back off while the server is away. Stops when
        `stop` is set, (with `exit_when_drained`) once `max_reports` are made and delivered, or
        when the control plane refuses the credential (`refused` says why)."""
        try:
            try:
                self.join()  # first, so that a simulated source measures the node's GPUs from its first report
            except AgentError:
                pass  # the server is away: reports buffer meanwhile, and the first send joins
            self._loop(stop, max_reports=max_reports, exit_when_drained=exit_when_drained)
        except CredentialRefused as exc:
            self.refused = str(exc)
            logger.error("the control plane refused this agent (%s): its credential was revoked, another agent joined "
                         "as node %s, or the join token was already used; stopping with %d report(s) unsent; "
                         "to report again, start it with a new join token", exc, self.node, len(self.buffer))

    def _loop(self, stop: threading.Event, *, max_reports: int | None, exit_when_drained: bool) -> None:
        next_collect = next_send = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            producing = max_reports is None or self.produced < max_reports
            if producing and now >= next_collect:
                self.collect()
                next_collect += self.interval
            if now >= next_send:
                try:
                    self.flush()
                    if self.failures:
                        logger.info("control plane reachable again after %d failure(s)", self.failures)
                    self.failures = 0
                    next_send = next_collect if producing else now + self.interval
                except AgentError as exc:
                    self.failures += 1
                    delay = backoff_delay(self.failures, base=self.backoff_base, cap=self.backoff_cap, rng=self.rng)
                    logger.warning("%s; %d report(s) buffered; retrying in %.1fs", exc, len(self.buffer), delay)
                    next_send = now + delay
            if exit_when_drained and not producing and len(self.buffer) == 0 and not self.failures:
                return
            wait = (min(next_collect, next_send) if producing else next_send) - time.monotonic()
            stop.wait(max(0.0, wait))

    def close(self) -> None:
        self.http.close()
        self.buffer.close()


def _faults(values: list[str]) -> dict[int, list[tuple[int, int]]]:
    """`--fault 79@3:0` raises Xid 79 on GPU 0 at the third sample."""
    out: dict[int, list[tuple[int, int]]] = {}
    for value in values:
        xid, _, rest = value.partition("@")
        when, _, gpu = rest.partition(":")
        out.setdefault(int(when or 1), []).append((int(gpu or 0), int(xid)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m monitoring.agent", description="EBCloud GPU node agent")
    parser.add_argument("--server", required=True, help="control plane URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--join-token", help="single-use join token id.secret (first start)")
    parser.add_argument("--node", help="the node name this machine was provisioned as (with --join-token)")
    parser.add_argument("--credential-file", help="where the credential is kept (default: BUFFER_DIR/credential.json)")
    parser.add_argument("--buffer-dir", default=os.environ.get("EBCLOUD_AGENT_DIR", "var/agent"))
    parser.add_argument("--buffer-cap", type=int, default=10_000, help="reports kept while the server is away")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between reports")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--backoff-cap", type=float, default=60.0)
    parser.add_argument("--simulate", action="store_true", help="simulated GPUs even if NVML is there")
    parser.add_argument("--seed", type=int, default=0, help="simulated source's seed")
    parser.add_argument("--gpus", type=int, help="simulated GPUs (default: as many as the node has, from its join answer; 8 before)")
    parser.add_argument("--fault", action="append", default=[], metavar="XID@N[:GPU]", help="simulated Xid at sample N")
    parser.add_argument("--count", type=int, help="make this many reports, deliver them, then exit")
    parser.add_argument("--once", action="store_true",
                        help="print one sample and the count of dead-lettered reports as JSON and exit")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    source = source_open(simulate=args.simulate, seed=args.seed, gpus=args.gpus)
    if isinstance(source, SimulatedSource) and args.fault:
        source.faults = _faults(args.fault)
    if args.once:
        driver, cuda = source.versions()
        buffer_path = Path(args.buffer_dir) / "reports.sqlite3"
        print(json.dumps({"source": source.name, "driverVersion": driver, "cudaVersion": cuda, "gpus": source.sample(),
                          "deadLettered": dead_letter_count(buffer_path), "deadLetterFile": str(dead_letter_path(buffer_path))},
                         indent=2))
        return 0
    if not args.credential_file and not args.join_token:
        parser.error("give --join-token T --node NAME, or --credential-file F")
    buffer_dir = Path(args.buffer_dir)
    agent = Agent(server=args.server, source=source, buffer=DiskBuffer(buffer_dir / "reports.sqlite3", cap=args.buffer_cap),
                  credential_file=args.credential_file or buffer_dir / "credential.json", node=args.node,
                  join_token=args.join_token, interval=args.interval, batch_size=args.batch_size, backoff_cap=args.backoff_cap)
    if isinstance(source, SimulatedSource):  # its hardware faults come from the simulated cloud
        source.fault_feed = ControlPlaneFaults.of(agent)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    logger.info("agent for %s using the %s GPU source, buffer %s", args.node or "(credential file)", source.name, buffer_dir)
    try:
        agent.run(stop, max_reports=args.count, exit_when_drained=args.count is not None)
    finally:
        agent.close()
    return EXIT_CREDENTIAL_REFUSED if agent.refused else 0


if __name__ == "__main__":
    sys.exit(main())
