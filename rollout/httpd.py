"""Stdlib HTTP serving with limits: the model server (``serving.serve``) and the embedded shop
(``rollout.envs.shop.server``) both run on it.

What a plain ``ThreadingHTTPServer`` lacks, and this adds:
- a bounded number of connections served at once (one thread each); past it a connection gets ``503`` and is closed,
  so idle or hostile sockets cannot hold an unbounded number of threads;
- a socket timeout: a client that sends nothing (an idle keep-alive, a body shorter than its ``Content-Length``) is
  dropped after ``timeout`` seconds instead of holding its thread forever;
- request bodies read only with a valid ``Content-Length`` no larger than ``max_body`` (``413`` above it, ``400``
  for a negative, non-numeric or short one; ``411`` for chunked bodies, which neither server needs);
- a listen backlog of ``LISTEN_BACKLOG`` instead of socketserver's 5. With 5, a burst of connections (a browser
  context opens several at once) fills the accept queue whenever the accepting thread waits for the CPU, and the
  kernel then drops the handshake's last packets, so a request stalls for the SYN-ACK retransmissions (1 + 2 + 4 + 8
  + 16 s): measured with 50 connections beside two busy loops, 69 of 1,200 requests took over 0.9 s and one 27.6 s
  (the load tests' rare 30 s timeouts); with 128, none over 0.21 s.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_CONNECTIONS = 64
LISTEN_BACKLOG = 128  # the kernel caps it at net.core.somaxconn
SOCKET_TIMEOUT = 30.0
MAX_BODY = 4 << 20  # 4 MiB: a chat request of a 32k-token prompt is well below


class BodyError(Exception):
    """A request body that is refused before it is read; ``status`` is the HTTP answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most ``max_connections`` at once."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG  # listen()'s backlog (socketserver's default is 5)

    def __init__(self, address, handler, max_connections: int = MAX_CONNECTIONS):
        if max_connections < 1:
            raise ValueError(f"max_connections={max_connections}: must be >= 1")
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        """Handle the connection in a thread when a slot is free, else answer 503 and close it."""
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                    b"Content-Length: 21\r\nConnection: close\r\n\r\ntoo many connections\n"
                )
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        """Serve the connection, then free its slot and close it."""
        # The slot is freed before the socket closes: a client that sees its connection end and reconnects at once
        # finds the slot free, not a 503.
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self._slots.release()
            self.shutdown_request(request)


class LimitedHandler(BaseHTTPRequestHandler):
    """``timeout`` is the socket timeout (``StreamRequestHandler`` applies it); ``read_body`` enforces ``max_body``."""

    timeout = SOCKET_TIMEOUT
    max_body = MAX_BODY
    protocol_version = "HTTP/1.1"
    # a request line that cannot be parsed still gets a status line with its 400 (HTTP/0.9 answers are bare bodies)
    default_request_version = "HTTP/1.0"

    def read_body(self) -> bytes:
        """The request body by its Content-Length (empty without one); ``BodyError`` for a chunked, malformed,
        oversized, slow or short body."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.close_connection = True
            raise BodyError(411, "chunked request bodies are not accepted: send a Content-Length")
        raw = self.headers.get("Content-Length")
        if raw is None or not raw.strip():
            return b""
        try:
            n = int(raw)
        except ValueError:
            self.close_connection = True  # the body's end is unknown: the connection cannot be reused
            raise BodyError(400, f"Content-Length {raw[:40]!r} is not an integer") from None
        if n < 0:
            self.close_connection = True
            raise BodyError(400, f"Content-Length {n} is negative")
        if n > self.max_body:
            self.close_connection = True
            raise BodyError(413, f"the body of {n} bytes is over this server's limit of {self.max_body}")
        try:
            data = self.rfile.read(n)
        except (socket.timeout, TimeoutError):
            self.close_connection = True
            raise BodyError(408, f"the body was not sent within {self.timeout:.0f} s") from None
        if len(data) < n:
            self.close_connection = True
            raise BodyError(400, f"the body ended after {len(data)} of {n} bytes")
        return data


def is_loopback(host: str) -> bool:
    """``127.0.0.1``, ``::1``, ``localhost``: a bind that nothing outside this machine reaches."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
