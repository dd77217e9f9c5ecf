"""Small network probes with plain sockets: round-trip time and TCP rate between two hosts.

No ``ping`` or ``iperf`` is needed: ``python -m parplan.runtime.netprobe serve ADDRESS PORT`` runs
a server that echoes single bytes (mode ``e``) or swallows a stream and answers how fast its second half came
(mode ``s``); ``rtt``/``rate`` run the client side and print one JSON object. The emulated
clusters (:mod:`parplan.runtime.netns`) start these inside their namespaces to check the shaping
they set up (``parplan emulate CLUSTER --check``).
"""

from __future__ import annotations

import json
import socket
import statistics
import struct
import sys
import threading
import time

CHUNK_BYTES = 64 * 1024
PORT = 47_123
"""The port every probe server listens on (inside its own namespace, so it cannot clash)."""


SO_TIMESTAMPNS = 35
"""Linux's socket option (and control message) for kernel receive times in nanoseconds."""


def _recv_exactly(conn: socket.socket, size_bytes: int) -> bytes:
    data = b""
    while len(data) < size_bytes and (chunk := conn.recv(size_bytes - len(data))):
        data += chunk
    return data


def _kernel_time_s(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """The kernel's receive time of the last segment a ``recvmsg`` copied, when it says."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            seconds, nanoseconds = struct.unpack("qq", data[:16])
            return float(seconds + nanoseconds * 1e-9)
    return None


def _sink(conn: socket.socket) -> None:
    """Read a stream announced by its 8-byte size; answer ``RECEIVED TIMED_BYTES TIMED_S``: the
    bytes and time of its second half, so TCP's slow start is not counted in the rate. Times are
    the kernel's receive times, so a receiver the scheduler keeps waiting does not skew them."""
    conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    (size_bytes,) = struct.unpack("!Q", _recv_exactly(conn, 8))
    received, timed_from, start_s, end_s = 0, 0, 0.0, 0.0
    while True:
        chunk, ancillary, _, _ = conn.recvmsg(CHUNK_BYTES, socket.CMSG_SPACE(16))
        if not chunk:
            break
        received += len(chunk)
        now_s = _kernel_time_s(ancillary) or time.time()
        if not timed_from and received >= size_bytes // 2:
            timed_from, start_s = received, now_s
        end_s = now_s
    conn.sendall(f"{received} {received - timed_from} {end_s - start_s!r}\n".encode())


def _serve_one(conn: socket.socket) -> None:
    """One client: echo bytes (``e``) or count a stream (``s``, :func:`_sink`)."""
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mode = conn.recv(1)
        if mode == b"e":
            while byte := conn.recv(1):
                conn.sendall(byte)
        elif mode == b"s":
            _sink(conn)


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
    """Bytes per second of one TCP stream of ``size_bytes`` to ``address``, as the receiver saw
    its second half arrive (the first half is TCP's slow start and the shapers' bursts)."""
    block = b"\0" * CHUNK_BYTES
    with _connect(address, port, timeout_s) as sock:
        sock.sendall(b"s" + struct.pack("!Q", size_bytes))
        left = size_bytes
        while left > 0:
            left -= sock.send(block[: min(left, CHUNK_BYTES)])
        sock.shutdown(socket.SHUT_WR)
        answer = sock.makefile().readline().split()
    if len(answer) != 3 or int(answer[0]) != size_bytes:
        got = answer[0] if answer else "nothing"
        raise ConnectionError(f"{address} received {got} of {size_bytes} bytes")
    return int(answer[1]) / float(answer[2])


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
