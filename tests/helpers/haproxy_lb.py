"""A real HAProxy in front of the fleet tests' fronts: ``balance roundrobin``, no stickiness.

:func:`start` runs Debian's ``haproxy`` (``scripts/install_peers.sh`` installs it; it lives in
``/usr/sbin``) in the foreground, bound to 127.0.0.1 on a free port, in HTTP mode with
``option http-server-close``: every request is balanced on its own, so the requests of one
client connection reach the fronts in turn. A missing binary goes through
``peer_rule.missing``. Its stats are not exposed; the test counts the requests each front
served instead.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from peer_rule import missing
from redis_server import free_port

#: Seconds HAProxy may take to listen.
START_TIMEOUT = 10.0

_CONFIG = """global
    maxconn 256
defaults
    mode http
    option http-server-close
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout tunnel 60s
frontend lb
    bind 127.0.0.1:{port}
    default_backend fronts
backend fronts
    balance roundrobin
{servers}
"""


def require() -> str:
    """The ``haproxy`` executable, or :func:`peer_rule.missing`."""
    exe = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    if exe is None:
        missing("haproxy", "haproxy is not on PATH nor in /usr/sbin")
    return exe


@dataclass
class HaProxy:
    """One ``haproxy`` process balancing 127.0.0.1:``port`` over ``backends`` (ports)."""

    backends: Sequence[int]
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> HaProxy:
        exe = require()
        self.port = free_port()
        servers = "\n".join(f"    server f{i} 127.0.0.1:{p}" for i, p in enumerate(self.backends))
        config = Path(tempfile.mkdtemp(prefix="acp-fast-lb-")) / "haproxy.cfg"
        config.write_text(_CONFIG.format(port=self.port, servers=servers))
        self.process = subprocess.Popen([exe, "-db", "-f", str(config)], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + START_TIMEOUT
        import socket

        while True:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise RuntimeError(f"haproxy exited {self.process.returncode}: {err}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"haproxy did not listen in {START_TIMEOUT} s")
            time.sleep(0.02)

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if process is not None and process.stderr:
            process.stderr.close()
