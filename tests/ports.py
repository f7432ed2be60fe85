"""A port for a server a test starts in a process of its own (gunicorn, the OpenAI stub, an MCP server).

Such a port is chosen before the server binds it, so another process may bind it in between. The suite's processes
run side by side, and a listener of another test (bound to port 0, as tests/agenthost/listeners.py does) once got the
port a gunicorn was still starting on, and counted the gunicorn's readiness probe as a request its tool sent. So the
port comes from below the kernel's ephemeral range, which port 0 and outgoing connections draw from, at random.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000


def free_port() -> int:
    ephemeral_low = int(_EPHEMERAL_RANGE.read_text().split()[0]) if _EPHEMERAL_RANGE.exists() else 32_768
    # SystemRandom: hypothesis seeds `random` in the tests it runs, and two processes must not draw alike.
    draw = random.SystemRandom()
    while True:
        port = draw.randint(_LOWEST, max(_LOWEST + 1, ephemeral_low - 1))
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
