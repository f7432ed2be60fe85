"""What a process agent runs inside under test (agenthost/runtimes/process.py), in its network namespace of its own:
loopback brought up, a forwarder on 127.0.0.1:PORT to the model gateway's Unix socket outside, and the program as a
child, whose exit this process takes for its own. Standard library only: it is started as a script
(`python -I netns_forwarder.py SOCKET PORT COMMAND...`), never imported by agenttest."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import threading

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
IFREQ = "16sH14s"


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack(IFREQ, b"lo", 0, bytes(14))
        flags = struct.unpack(IFREQ, fcntl.ioctl(probe, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP, bytes(14)))


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
    path, port, command = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    loopback_up()
    listener = socket.create_server(("127.0.0.1", port))
    threading.Thread(target=forward, args=(listener, path), daemon=True).start()
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        sys.stderr.write(f"could not start {command[0]!r}: {exc}\n")
        sys.exit(127)
    code = child.wait()
    if code < 0:
        # Ended by a signal: so is this process, for whoever waits on it to see the same.
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
