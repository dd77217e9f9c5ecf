"""Small network probes with plain sockets: round-trip time and TCP rate between two hosts.

No ``ping`` or ``iperf`` is needed: ``python -m parplan.runtime.netprobe serve ADDRESS PORT`` runs
a server that echoes single bytes (mode ``e``) or swallows a stream and answers with its length
(mode ``s``); ``rtt``/``rate`` run the client side and print one JSON object. The emulated
clusters (:mod:`parplan.runtime.netns`) start these inside their namespaces to check the shaping
they set up (``parplan emulate CLUSTER --check``).
"""

from __future__ import annotations

import json
import socket
import statistics
import sys
import threading
import time

CHUNK_BYTES = 64 * 1024
PORT = 47_123
"""The port every probe server listens on (inside its own namespace, so it cannot clash)."""


def _serve_one(conn: socket.socket) -> None:
    """One client: echo bytes (``e``) or count a stream and answer its length (``s``)."""
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mode = conn.recv(1)
        if mode == b"e":
            while byte := conn.recv(1):
                conn.sendall(byte)
        elif mode == b"s":
            received = 0
            while chunk := conn.recv(CHUNK_BYTES):
                received += len(chunk)
            conn.sendall(str(received).encode() + b"\n")


def serve(address: str, port: int = PORT) -> None:
    """Accept probes on ``address:port`` until killed."""
    with socket.create_server((address, port), reuse_port=False) as server:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        while True:
            conn, _ = server.accept()
            threading.Thread(target=_serve_one, args=(conn,), daemon=True).start()


def _connect(address: str, port: int, timeout_s: float) -> socket.socket:
    """A TCP connection to a probe server, retried until it listens or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sock = socket.create_connection((address, port), timeout=timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def rtt_s(address: str, count: int = 20, port: int = PORT, timeout_s: float = 10.0) -> float:
    """The median round-trip time of one byte over TCP to ``address`` (first exchange excluded)."""
    with _connect(address, port, timeout_s) as sock:
        sock.sendall(b"e")
        times = []
        for _ in range(count + 1):
            start = time.perf_counter()
            sock.sendall(b"x")
            if not sock.recv(1):
                raise ConnectionError(f"{address} closed the connection")
            times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def rate_Bps(address: str, size_bytes: int, port: int = PORT, timeout_s: float = 60.0) -> float:
    """Bytes per second of one TCP stream of ``size_bytes`` to ``address``, timed until the
    receiver has counted every byte (so bytes queued in shapers are not counted as sent)."""
    block = b"\0" * CHUNK_BYTES
    with _connect(address, port, timeout_s) as sock:
        sock.sendall(b"s")
        start = time.perf_counter()
        left = size_bytes
        while left > 0:
            sent = sock.send(block[: min(left, CHUNK_BYTES)])
            left -= sent
        sock.shutdown(socket.SHUT_WR)
        answer = sock.makefile().readline()
        elapsed_s = time.perf_counter() - start
    if int(answer or 0) != size_bytes:
        raise ConnectionError(f"{address} received {answer.strip() or 'nothing'} of {size_bytes} bytes")
    return size_bytes / elapsed_s


def main(argv: list[str]) -> int:
    """``serve ADDRESS`` | ``rtt ADDRESS...`` | ``rate SIZE_BYTES ADDRESS...`` (JSON on stdout)."""
    command, *args = argv
    if command == "serve":
        serve(args[0])
    elif command == "rtt":
        print(json.dumps({a: rtt_s(a) for a in args}))
    elif command == "rate":
        print(json.dumps({a: rate_Bps(a, int(args[0])) for a in args[1:]}))
    else:
        raise SystemExit(f"unknown probe {command!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
