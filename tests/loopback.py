"""Raw TCP servers on loopback for tests: an endpoint that must misbehave in ways an HTTP
server library would not let it (a non-HTTP reply, a body cut short, a trickle), and an
internal service that the URL sandbox must keep pages away from."""

from __future__ import annotations

import base64
import hashlib
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


WEBSOCKET_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class LoopbackService:
    """A service on a loopback (or other internal) address that the sandbox must keep pages
    away from. It records every request line it is sent (`requests`) and the request's
    Cookie header (`cookies`), answers HTTP with a page and a WebSocket handshake with the
    handshake and one text message, "hello"."""

    def __init__(self, host: str = "127.0.0.1"):
        self.requests: list[str] = []
        self.cookies: list[str] = []
        service = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                request_line = self.rfile.readline().decode("latin-1").strip()
                headers = {}
                while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                service.requests.append(request_line or "(a connection that sent no request)")
                service.cookies.append(headers.get("cookie", ""))
                if headers.get("upgrade", "").lower() == "websocket":
                    service._accept_websocket(self, headers["sec-websocket-key"])
                else:
                    body = b"<h1>internal service</h1>"
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n"
                                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

        self.server = socketserver.ThreadingTCPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def _accept_websocket(handler, key: str) -> None:
        accept = base64.b64encode(hashlib.sha1(key.encode() + WEBSOCKET_GUID).digest())
        handler.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                            b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        handler.wfile.write(b"\x81\x05hello")  # one unmasked text frame
        handler.wfile.flush()
        handler.rfile.read(1)  # hold the connection until the client goes

    def close(self):
        self.server.shutdown()
        self.server.server_close()
