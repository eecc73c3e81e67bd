"""A free port on 127.0.0.1: for a server a test starts, or as an address nothing listens on."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listened on a moment ago (the system picked it, and it was let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
