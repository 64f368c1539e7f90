"""Loopback-only networking for host-local process groups. Not a rendezvous of ours (torch's FileStore is).

A process group opens sockets of its own besides its rendezvous: gloo's pairs listen on the address
of the interface gloo picks (by default the one the host name resolves to, often a public address),
and NCCL's bootstrap listens on the first interface it likes (it skips `lo` unless told). When every
rank runs on this host, `loopback_socket_env()` names the loopback interface in GLOO_SOCKET_IFNAME and
NCCL_SOCKET_IFNAME (a value the user set is kept), so those listeners bind 127.0.0.1 / ::1 only.
torch's TCPStore cannot be bound to one address (its server binds `::`, falling back to `0.0.0.0`,
whatever host name it is given), so host-local groups rendezvous through a FileStore instead.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
_IFF_LOOPBACK = 0x8  # <linux/if.h>


def loopback_ifname(sys_class_net: str | Path = "/sys/class/net") -> str:
    """The name of this host's loopback interface: the first in /sys/class/net whose flags carry
    IFF_LOOPBACK (Linux), else "lo"."""
    root = Path(sys_class_net)
    with contextlib.suppress(OSError):
        for d in sorted(root.iterdir()):
            with contextlib.suppress(OSError, ValueError):
                if int((d / "flags").read_text().strip(), 16) & _IFF_LOOPBACK:
                    return d.name
    return "lo"


def loopback_socket_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """{GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME: value} for a host-local process group: the value in
    `environ` (default os.environ) when the user set one, else the loopback interface's name."""
    env = os.environ if environ is None else environ
    lo = loopback_ifname()
    return {k: env.get(k) or lo for k in SOCKET_IFNAME_VARS}


@contextlib.contextmanager
def environ_set(values: Mapping[str, str]) -> Iterator[None]:
    """Set `values` in os.environ for the duration (processes spawned inside inherit them; groups made
    inside read them), then restore what was there before."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
