"""A bounded load test of a loopback HTTP server: many requests over a pool of connections, raw sockets, so
malformed requests reach the server as sent."""

from __future__ import annotations

import collections
import concurrent.futures
import socket
import threading
import time

import psutil


def exchange(host: str, port: int, data: bytes, timeout: float = 30.0) -> tuple[int, bytes]:
    """Send one request on its own connection; -> (status, body) of the answer (0: closed without an answer)."""
    with socket.create_connection((host, port), timeout=timeout) as c:
        c.sendall(data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = c.recv(65536)
            if not chunk:
                break
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/"):
            return 0, buf
        n = int(
            next((ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")), b"0")
        )
        while len(body) < n:
            chunk = c.recv(65536)
            if not chunk:
                break
            body += chunk
    return int(head.split(b" ")[1]), body


def request(host: str, port: int, data: bytes, timeout: float = 30.0) -> int:
    """``exchange``'s status only."""
    return exchange(host, port, data, timeout)[0]


def hammer(host: str, port: int, requests: list[bytes], connections: int = 50) -> collections.Counter:
    with concurrent.futures.ThreadPoolExecutor(connections) as pool:
        return collections.Counter(pool.map(lambda d: request(host, port, d), requests))


def settle(threads0: int, wait_s: float = 10.0) -> int:
    """Wait for the server's connection threads to end; -> threads still alive beyond ``threads0``."""
    end = time.monotonic() + wait_s
    while threading.active_count() > threads0 and time.monotonic() < end:
        time.sleep(0.1)
    return threading.active_count() - threads0


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def post(path: str, body: bytes, length: str | None = None) -> bytes:
    n = str(len(body)) if length is None else length
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
