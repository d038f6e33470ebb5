"""Ports for the tests' own servers and process groups, asked of the OS.

CI runs two pytest processes side by side (.ci/run's streams) and a developer may run more, so
no test names a fixed port: ``free_port()`` binds port 0 and returns what the OS gave. The port is
free when returned; the caller binds it right after (a race with another process is possible
but needs the OS to hand out the same ephemeral port twice in that window).
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that no process holds now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
