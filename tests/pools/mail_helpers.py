"""A real SMTP server on the loopback for the tests of alert mail: Django's SMTP backend talks to
it as to a relay. It refuses the addresses it is told to (550, as a relay does for a mailbox that
does not exist) and keeps the messages it accepts."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class MailServer:
    refused: set[str] = field(default_factory=set)
    messages: list[list[str]] = field(default_factory=list)  # the accepted recipients of each message
    port: int = 0


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self):
        state = self.server.state
        self.reply("220 test relay")
        recipients: list[str] = []
        while line := self.rfile.readline():
            verb = line[:4].decode("ascii", "replace").upper()
            if verb == "RCPT":
                address = line.decode().split(":", 1)[1].strip().split(" ")[0].strip("<>")
                if address in state.refused:
                    self.reply("550 5.1.1 no such mailbox")
                    continue
                recipients.append(address)
            elif verb == "MAIL":
                recipients = []
            elif verb == "DATA":
                self.reply("354 go on")
                while self.rfile.readline() not in (b".\r\n", b""):
                    pass
                state.messages.append(sorted(recipients))
            elif verb == "QUIT":
                self.reply("221 bye")
                return
            self.reply("250 ok")

    def reply(self, text: str) -> None:
        self.wfile.write(text.encode() + b"\r\n")


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    state: MailServer


@contextmanager
def smtp_relay(settings) -> Iterator[MailServer]:
    """Within the block alert mail goes through Django's SMTP backend to this server (`settings`:
    pytest-django's fixture); `.refused` is the set of addresses it refuses."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.state = MailServer(port=server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.state.port
    settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD, settings.EMAIL_USE_TLS = "", "", False
    settings.EMAIL_TIMEOUT = 5
    try:
        yield server.state
    finally:
        server.shutdown()
        server.server_close()
