"""A raw TCP server on loopback for tests whose endpoint must misbehave in ways an HTTP
server library would not let it (a non-HTTP reply, a body cut short, a trickle)."""

from __future__ import annotations

import socketserver
import threading
from typing import Callable


def read_request(stream) -> None:
    """Read one HTTP request (headers, then a Content-Length body) off `stream`."""
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b"\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    stream.read(length)


class TcpEndpoint:
    """Serves each connection with `serve(rfile, wfile)` on its own thread; `url` is the
    base URL of an OpenAI-style API at it."""

    def __init__(self, serve: Callable):
        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                serve(self.rfile, self.wfile)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
