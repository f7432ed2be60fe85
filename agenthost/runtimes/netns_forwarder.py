"""What a process agent runs inside under test (agenthost/runtimes/process.py), in its network namespace of its own:
loopback brought up, a forwarder on 127.0.0.1:PORT to the model gateway's Unix socket outside, and the program as a
child, whose exit this process takes for its own. Standard library only: it is started as a script
(`python -I netns_forwarder.py ATTEMPTS PORT=SOCKET [PORT=SOCKET...] -- COMMAND...`: a forwarder per gateway), never
imported by agenttest.

Every address is made local to the namespace's loopback (local routes for 0.0.0.0/0 and ::/0), so a connection the
program tries anywhere — a bank's API, a name server, over IPv4 or IPv6 — becomes a packet on loopback, refused there,
and a packet socket on loopback sees it: each TCP connection attempt and UDP datagram, except those to the gateways'
forwarders, is written to ATTEMPTS ("tcp 10.0.0.1:443", "udp [2001:db8::53]:53"), which agenttest reads when the turn
ends. Where the kernel has IPv6 turned off, no IPv6 packet can be sent at all: there is nothing to route or name."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from typing import Any

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
IFREQ = "16sH14s"
# Netlink, to route every IPv4 address to loopback as local (what `ip route add local 0.0.0.0/0 dev lo` sends).
RTM_NEWROUTE, NLMSG_ERROR = 24, 2
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
RT_TABLE_LOCAL, RTPROT_BOOT, RT_SCOPE_HOST, RTN_LOCAL, RTA_OIF = 255, 3, 254, 2, 4
ETH_P_ALL, PACKET_HOST, ETHERNET_HEADER = 0x0003, 0, 14
TCP, UDP, SYN, ACK = 6, 17, 0x02, 0x10
# Where the gateways' forwarders listen: a program that asks for `localhost` may get either.
LOOPBACK = ("127.0.0.1", "[::1]")


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack(IFREQ, b"lo", 0, bytes(14))
        flags = struct.unpack(IFREQ, fcntl.ioctl(probe, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP, bytes(14)))


def route_everything_here() -> None:
    local_route(socket.AF_INET)
    try:
        local_route(socket.AF_INET6)
    except OSError as exc:
        # IPv6 turned off in this kernel or namespace (EACCES, EAFNOSUPPORT, …): the program cannot send IPv6 at all.
        if not ipv6_disabled():
            raise OSError(exc.errno, f"could not route every IPv6 address to loopback: {exc.strerror}") from None


def ipv6_disabled() -> bool:
    try:
        with open("/proc/sys/net/ipv6/conf/lo/disable_ipv6", encoding="ascii") as setting:
            return setting.read().strip() != "0"
    except OSError:
        return True  # no IPv6 in this kernel


def local_route(family: int) -> None:
    """Every address of `family` local to loopback: what `ip route add local 0.0.0.0/0 dev lo table local` sends
    (`::/0` for IPv6)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as link:
        body = struct.pack("BBBBBBBBI", family, 0, 0, 0, RT_TABLE_LOCAL, RTPROT_BOOT, RT_SCOPE_HOST, RTN_LOCAL, 0)
        body += struct.pack("HHI", 8, RTA_OIF, socket.if_nametoindex("lo"))
        flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE
        link.send(struct.pack("IHHII", 16 + len(body), RTM_NEWROUTE, flags, 1, 0) + body)
        answer = link.recv(4096)
        kind = struct.unpack("IHHII", answer[:16])[1]
        code = struct.unpack("i", answer[16:20])[0] if kind == NLMSG_ERROR else 0
        if code:
            raise OSError(-code, f"could not route every address to loopback: {os.strerror(-code)}")


def attempt_of(frame: bytes, gateway_ports: frozenset[int]) -> str:
    """"tcp 10.0.0.1:443" (or "tcp [2001:db8::1]:443") for a frame that opens a TCP connection or carries a UDP
    datagram, other than to a gateway's forwarder; "" for any other frame."""
    packet = frame[ETHERNET_HEADER:]
    if len(packet) >= 20 and packet[0] >> 4 == 4:
        header = (packet[0] & 0x0F) * 4
        protocol, target = packet[9], socket.inet_ntoa(packet[16:20])
    elif len(packet) >= 40 and packet[0] >> 4 == 6:
        # The fixed header only: a TCP or UDP socket's packets carry no extension header (a raw socket's might, and
        # would still reach nothing but loopback).
        header, protocol = 40, packet[6]
        target = f"[{socket.inet_ntop(socket.AF_INET6, packet[24:40])}]"
    else:
        return ""
    if len(packet) < header + 4:
        return ""
    port = struct.unpack("!H", packet[header + 2:header + 4])[0]
    if protocol == TCP and len(packet) >= header + 14:
        flags = packet[header + 13]
        if not flags & SYN or flags & ACK or (target in LOOPBACK and port in gateway_ports):
            return ""
        return f"tcp {target}:{port}"
    if protocol == UDP:
        return f"udp {target}:{port}"
    return ""


class Attempts:
    """What the packet socket saw, written to the file as it is seen (a killed namespace keeps what was written)."""

    def __init__(self, path: str, gateway_ports: frozenset[int]) -> None:
        self.sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sniffer.bind(("lo", 0))
        self.gateway_ports = gateway_ports
        self.out = open(path, "a", encoding="utf-8")  # noqa: SIM115 — open for the process's life
        self.stop = threading.Event()

    def watch(self) -> None:
        while not self.stop.is_set():
            if select.select([self.sniffer], [], [], 0.1)[0]:
                self.take(self.sniffer.recvfrom(65536))

    def take(self, received: tuple[bytes, tuple[Any, ...]]) -> None:
        frame, address = received
        if address[2] != PACKET_HOST:
            return  # loopback shows each frame twice, going out and coming in
        if attempt := attempt_of(frame, self.gateway_ports):
            self.out.write(attempt + "\n")
            self.out.flush()

    def drain(self) -> None:
        """Whatever is queued: a packet on loopback is queued before the call that sent it returns."""
        self.sniffer.setblocking(False)
        try:
            while True:
                self.take(self.sniffer.recvfrom(65536))
        except BlockingIOError:
            pass


def pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def forward(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()


def main() -> None:
    split = sys.argv.index("--")
    attempts_path, pairs, command = sys.argv[1], sys.argv[2:split], sys.argv[split + 1:]
    routes = {int(port): path for port, _, path in (pair.partition("=") for pair in pairs)}
    loopback_up()
    route_everything_here()
    attempts = Attempts(attempts_path, frozenset(routes))
    watcher = threading.Thread(target=attempts.watch, daemon=True)
    watcher.start()
    for port, path in routes.items():
        for host, family in (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)):
            try:
                listener = socket.create_server((host, port), family=family)
            except OSError:
                if family == socket.AF_INET6 and ipv6_disabled():
                    continue
                raise
            threading.Thread(target=forward, args=(listener, path), daemon=True).start()
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        sys.stderr.write(f"could not start {command[0]!r}: {exc}\n")
        sys.exit(127)
    code = child.wait()
    attempts.stop.set()
    watcher.join()
    attempts.drain()
    if code < 0:
        # Ended by a signal: so is this process, for whoever waits on it to see the same.
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
