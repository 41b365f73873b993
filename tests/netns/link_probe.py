#!/usr/bin/env python3
"""Measures a link between two test hosts (tests/netns/delay_line_test.sh), run inside them with
`ip netns exec`:

  link_probe.py echo PORT SECONDS         answer UDP datagrams on PORT for SECONDS
  link_probe.py rtt HOST PORT COUNT       median round trip of COUNT 64-byte datagrams, in ms
  link_probe.py sink PORT SECONDS         accept one TCP stream; print its steady Mbit/s
  link_probe.py source HOST PORT MBYTES   send MBYTES over TCP (once the sink listens)

The steady rate is that of the stream's last half (its first half holds TCP's slow start).
Every wait has a deadline; a lost datagram or a silent peer is an error, not a hang."""
import socket
import statistics
import sys
import time


def echo(port, seconds):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            data, peer = s.recvfrom(2048)
        except socket.timeout:
            break
        s.sendto(data, peer)


def rtt(host, port, count):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def probe(seq, timeout):
        """Round trip of datagram `seq` in ms; answers to earlier ones are skipped."""
        payload = seq.to_bytes(4, "big") + b"x" * 60
        start = time.perf_counter()
        s.sendto(payload, (host, port))
        while True:
            s.settimeout(max(0.001, timeout - (time.perf_counter() - start)))
            data, _ = s.recvfrom(2048)  # socket.timeout past the deadline
            if data == payload:
                return (time.perf_counter() - start) * 1000

    # First, until the echo answers (it may not listen yet; 10 s at most): this also resolves
    # the peer's address (ARP), which the measured datagrams then do not wait for.
    for seq in range(10):
        try:
            probe(seq, 1.0)
            break
        except socket.timeout:
            if seq == 9:
                raise
    times = [probe(100 + k, 2.0) for k in range(count)]
    print("%.2f" % statistics.median(times))


def sink(port, seconds):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(1)
    listener.settimeout(seconds)
    conn, _ = listener.accept()
    conn.settimeout(seconds)
    marks = []
    total = 0
    while True:
        data = conn.recv(1 << 20)
        if not data:
            break
        total += len(data)
        marks.append((time.perf_counter(), total))
    half = total / 2
    t_half = next(t for t, b in marks if b >= half)
    print("%.1f" % ((total - half) * 8 / (marks[-1][0] - t_half) / 1e6))


def source(host, port, mbytes):
    # The sink may not listen yet: connect again until it does (10 s at most).
    end = time.monotonic() + 10
    while True:
        try:
            s = socket.create_connection((host, port), timeout=10)
            break
        except ConnectionRefusedError:
            if time.monotonic() >= end:
                raise
            time.sleep(0.05)
    block = b"\0" * (1 << 20)
    for _ in range(mbytes):
        s.sendall(block)
    s.close()


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "echo":
        echo(int(args[0]), float(args[1]))
    elif mode == "rtt":
        rtt(args[0], int(args[1]), int(args[2]))
    elif mode == "sink":
        sink(int(args[0]), float(args[1]))
    elif mode == "source":
        source(args[0], int(args[1]), int(args[2]))
    else:
        sys.exit(__doc__)
