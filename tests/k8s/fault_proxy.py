"""Faults between the product and the test's kube-apiserver, for tests/k8s/test_api_faults*.py.

The API server itself stays real; what is faked is only what a real one does when it is sick
or out of reach, which a healthy test server cannot be made to do:
- `FaultProxy`: plain HTTP in, HTTPS on to the API server; a `Fault` answers chosen requests
  (method, path pattern) with a status and a Status body (500, 429, ...) or with nothing at all
  (a hang), everything else is forwarded (watches streamed as they come);
- `Blackhole`: accepts connections and never answers (an API server that hangs, or a load
  balancer in front of a dead one): the client's TLS handshake waits;
- `SilentLink`: TLS passed through as bytes; `cut()` makes every connection open now silent
  for good (no FIN, no RST: a partition, a NAT entry lost) while new connections go through.
Each runs on daemon threads for the rest of the session: a test only drops its reference.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HANG = 0  # a Fault's status that answers nothing


def status_body(code: int, message: str) -> bytes:
    """The Status object kube-apiserver answers a failed request with."""
    reason = {403: "Forbidden", 429: "TooManyRequests", 500: "InternalError"}.get(code, "Unknown")
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}).encode()


@dataclass
class Fault:
    method: str  # "GET", ..., or "*"
    path: str  # a regular expression searched in the request's path and query
    status: int  # HANG, or the HTTP status to answer
    message: str = "etcdserver: request timed out"
    times: int | None = None  # how many of the requests it matches it answers (None: all); the later ones go through

    def matches(self, method: str, path: str) -> bool:
        return self.method in ("*", method) and re.search(self.path, path) is not None and self.times != 0


class FaultProxy:
    """HTTP in front of the API server's HTTPS, answering the requests a fault matches itself."""

    def __init__(self, api_port: int, cafile: Path):
        self.faults: list[Fault] = []
        self.seen: list[tuple[str, str, int, float]] = []  # (method, path, status answered, time.monotonic() then)
        proxy, context = self, ssl.create_default_context(cafile=str(cafile))

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                fault = next((f for f in proxy.faults if f.matches(self.command, self.path)), None)
                if fault is not None:
                    proxy.seen.append((self.command, self.path, fault.status, time.monotonic()))
                    if fault.times is not None:
                        fault.times -= 1
                    if fault.status == HANG:
                        time.sleep(3600)
                        return
                    payload = status_body(fault.status, fault.message)
                    self.send_response(fault.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                upstream = http.client.HTTPSConnection("127.0.0.1", api_port, context=context, timeout=600)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "content-length")}
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                proxy.seen.append((self.command, self.path, answer.status, time.monotonic()))
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    while chunk := answer.read1(65536):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                finally:
                    upstream.close()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def requests(self, method: str, path: str) -> list[tuple[str, str, int, float]]:
        """The requests seen so far of this method whose path the pattern matches."""
        return [r for r in self.seen if r[0] == method and re.search(path, r[1])]


class Blackhole:
    """A listening port that accepts and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"https://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            self.held.append(self.sock.accept()[0])


class SilentLink:
    """Bytes passed both ways to the API server; `cut()` silences the connections open now."""

    def __init__(self, api_port: int):
        self.api_port = api_port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"https://127.0.0.1:{self.sock.getsockname()[1]}"
        self.links: list[threading.Event] = []  # one per connection: set when it is cut
        self.held: list[socket.socket] = []  # kept open: a socket collected would send a FIN
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        for link in self.links:
            link.set()

    def _accept(self) -> None:
        while True:
            client, _ = self.sock.accept()
            upstream = socket.create_connection(("127.0.0.1", self.api_port))
            cut = threading.Event()
            self.links.append(cut)
            self.held += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b, cut), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket, cut: threading.Event) -> None:
        try:
            while data := source.recv(65536):
                if cut.is_set():
                    return  # dropped, and nothing more: the peer hears nothing, not even a close
                target.sendall(data)
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def kubeconfig(path: Path, server: str, *, token: str, cafile: Path | None = None) -> str:
    """A kubeconfig for `server` with the test's admin token (and CA, for https)."""
    authority = f"    certificate-authority: {cafile}\n" if cafile else ""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: t\n  cluster:\n    server: {server}\n{authority}"
        f"users:\n- name: u\n  user:\n    token: {token}\n"
        "contexts:\n- name: t\n  context:\n    cluster: t\n    user: u\ncurrent-context: t\n"
    )
    return str(path)
