"""An attacker on the data network of a running job (docs/architecture/transport.md, "The data
channel"): it listens on the loopback interface for the job's datagrams (to the given data ports), then sends COUNT hostile datagrams
at the nodes, in equal parts: random bytes, truncated copies, copies with one bit flipped,
exact replays to the node they were for, replays to another node, and copies that claim the
old wire version. Seeded; prints what it sent, one line per kind.

    hostile_datagrams.py --ports P1,P2,P3 [--count 30000] [--rate 5000] [--seed 7]

Capturing needs CAP_NET_RAW (root): without it, it prints "SKIPPED: ..." and exits 77.
"""
import argparse
import errno
import random
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_VNET_HDR = 15
VNET_HDR_BYTES = 10
MAX_DATAGRAM = 1408  # the daemons' data channel (transport/wire/datagram.h)
KINDS = ["random", "truncated", "flipped", "replayed", "replayed_elsewhere", "old_version"]


def open_sniffer(vnet):
    try:
        sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        if vnet:
            sniffer.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
        sniffer.bind(("lo", 0))
    except (PermissionError, OSError) as e:
        print("SKIPPED: capturing the job's datagrams on lo needs root (CAP_NET_RAW): %s" % e)
        sys.exit(77)
    sniffer.settimeout(0.2)
    return sniffer


def capture(ports, want, seconds):
    """Payloads of UDP datagrams to `ports` seen on lo, with their destination port.

    The daemons send runs of datagrams with UDP segmentation offload, and lo passes a run on
    uncut: the virtio-net header that PACKET_VNET_HDR puts before each frame gives the segment
    size, and the run is cut into the datagrams a wire would carry. A kernel before 6.2 cannot
    describe such a run in that header (the read fails with EINVAL): then the capture goes on
    without it and keeps only what came alone (acks, heartbeats, single chunks)."""
    vnet = True
    sniffer = open_sniffer(vnet)
    seen = []
    deadline = time.monotonic() + seconds
    while len(seen) < want and time.monotonic() < deadline:
        try:
            frame, meta = sniffer.recvfrom(65535 + VNET_HDR_BYTES)
        except socket.timeout:
            continue
        except OSError as e:
            if not vnet or e.errno != errno.EINVAL:
                raise
            sniffer.close()
            vnet = False
            sniffer = open_sniffer(vnet)
            print("capturing without the virtio-net header (this kernel cannot give it for "
                  "segmented runs): single datagrams only")
            continue
        if meta[2] == socket.PACKET_OUTGOING:  # lo shows each packet twice: keep one
            continue
        # struct virtio_net_hdr: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset
        gso_size = struct.unpack("<H", frame[4:6])[0] if vnet else 0
        ip = frame[VNET_HDR_BYTES + 14:] if vnet else frame[14:]
        if len(ip) < 28 or ip[0] >> 4 != 4 or ip[9] != 17:
            continue
        udp = ip[(ip[0] & 15) * 4:]
        dst = struct.unpack("!H", udp[2:4])[0]
        payload = udp[8:]
        if not vnet and len(payload) > MAX_DATAGRAM:
            continue  # a run that cannot be cut without its segment size
        step = gso_size if gso_size else len(payload)
        for at in range(0, len(payload), max(step, 1)):
            d = payload[at:at + step]
            if dst in ports and d[:2] == b"DT":
                seen.append((dst, bytes(d)))
    sniffer.close()
    return seen


def hostile(kind, seen, ports, rng):
    dst, d = rng.choice(seen)
    if kind == "random":
        return dst, bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 1500)))
    if kind == "truncated":
        return dst, d[:rng.randrange(0, len(d))]
    if kind == "flipped":
        b = bytearray(d)
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
        return dst, bytes(b)
    if kind == "replayed":
        return dst, d
    if kind == "replayed_elsewhere":
        return rng.choice([p for p in ports if p != dst]), d
    b = bytearray(d)
    b[2] = 1
    return dst, bytes(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ports", required=True)
    ap.add_argument("--count", type=int, default=30000)
    ap.add_argument("--rate", type=int, default=5000, help="datagrams per second")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    ports = [int(p) for p in args.ports.split(",")]
    rng = random.Random(args.seed)
    seen = capture(set(ports), 500, 20)
    if len(seen) < 50:
        print("FAIL: saw only %d datagrams of the job in 20 s (is it running?)" % len(seen))
        return 1
    print("captured %d datagrams of the job" % len(seen))
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent = {k: 0 for k in KINDS}
    start = time.monotonic()
    for i in range(args.count):
        kind = KINDS[i % len(KINDS)]
        dst, d = hostile(kind, seen, ports, rng)
        out.sendto(d, ("127.0.0.1", dst))
        sent[kind] += 1
        ahead = start + (i + 1) / args.rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    for k in KINDS:
        print("sent %-20s %d" % (k, sent[k]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
