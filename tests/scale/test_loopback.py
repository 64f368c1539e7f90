"""Host-local process groups listen on the loopback interface only (agentrl.scale.net, WorkerPool)."""

import ipaddress
import os
import socket
import struct
import sys
from pathlib import Path

import pytest

from agentrl.rl.config import RLConfig
from agentrl.scale.net import SOCKET_IFNAME_VARS, environ_set, loopback_ifname, loopback_socket_env

TINY = dict(env="edit-menu", group_size=2, prompts_per_step=2, eval_size=2, eval_n=1, max_new_tokens=8, max_turns=2,
            micro=2, minibatches=1, device="cpu", n_boot=200, async_rollouts=True, rollout_workers=1)


def _address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address of a /proc/net/tcp{,6} "local_address" field (host byte order words, here little-endian)."""
    if len(hex_addr) == 8:
        return ipaddress.IPv4Address(socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(hex_addr, 16))))
    words = [int(hex_addr[i:i + 8], 16) for i in range(0, 32, 8)]
    return ipaddress.IPv6Address(socket.inet_ntop(socket.AF_INET6, struct.pack("<4I", *words)))


def listening_sockets(pids: list[int]) -> list[tuple[int, str, int]]:
    """[(pid, local address, port)] of every TCP socket in LISTEN state that one of `pids` holds open
    (the socket inodes of /proc/<pid>/fd matched against /proc/net/tcp and tcp6)."""
    owner: dict[str, int] = {}
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:  # closed meanwhile
                continue
            if target.startswith("socket:["):
                owner[target[8:-1]] = pid
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in owner:  # st 0A: TCP_LISTEN; f[9]: inode
                addr, port = f[1].split(":")
                out.append((owner[f[9]], str(_address(addr)), int(port, 16)))
    return out


def _is_loopback(addr: str) -> bool:
    ip = ipaddress.ip_address(addr)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def test_proc_net_parsing_reads_a_known_listener():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert (os.getpid(), "127.0.0.1", port) in listening_sockets([os.getpid()])
    assert _is_loopback("::1") and _is_loopback("::ffff:127.0.0.1") and not _is_loopback("::")
    assert not _is_loopback("0.0.0.0")


def test_loopback_ifname_reads_the_loopback_flag(tmp_path):
    for name, flags in {"eth0": "0x1003", "lo0": "0x9", "wlan1": "0x1003"}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "flags").write_text(flags + "\n")
    assert loopback_ifname(tmp_path) == "lo0"
    assert loopback_ifname(tmp_path / "missing") == "lo"
    if sys.platform == "linux":
        assert loopback_ifname() == "lo"


def test_user_set_interface_is_kept():
    lo = loopback_ifname()
    assert loopback_socket_env({}) == {k: lo for k in SOCKET_IFNAME_VARS}
    assert loopback_socket_env({"NCCL_SOCKET_IFNAME": "ib0"}) == {"GLOO_SOCKET_IFNAME": lo, "NCCL_SOCKET_IFNAME": "ib0"}
    before = os.environ.get("GLOO_SOCKET_IFNAME")
    with environ_set({"GLOO_SOCKET_IFNAME": "lo9"}):
        assert os.environ["GLOO_SOCKET_IFNAME"] == "lo9"
    assert os.environ.get("GLOO_SOCKET_IFNAME") == before


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net")
@pytest.mark.parametrize("launcher", ["process", "ray"])
def test_worker_pool_listens_on_loopback_only(tmp_path, monkeypatch, launcher):
    from agentrl.scale.workers import WorkerPool

    if launcher == "ray":
        ray = pytest.importorskip("ray")
    for k in SOCKET_IFNAME_VARS:
        monkeypatch.delenv(k, raising=False)  # what the pool picks itself, not what the test runner set
    pool = WorkerPool.start(RLConfig.from_flat(**TINY, worker_launcher=launcher, out=str(tmp_path / "run")), 1, "cpu",
                            timeout_s=300)
    try:
        pids = [os.getpid(), *pool.pids]
        assert pool.checksums()  # the group works: the listeners below carry it
        socks = listening_sockets(pids)
        worker_env = Path(f"/proc/{pool.pids[0]}/environ").read_bytes().split(b"\0")
    finally:
        pool.close()
        if launcher == "ray":
            ray.shutdown()
    assert {pid for pid, _, _ in socks} == set(pids), socks  # gloo's pair listeners, one side each at least
    assert all(_is_loopback(addr) for _, addr, _ in socks), socks
    # a spawned worker inherits it; a Ray actor gets it through runtime_env (and a local cluster that the
    # pool started inherits it from the driver)
    assert f"GLOO_SOCKET_IFNAME={loopback_ifname()}".encode() in worker_env
    assert not any(k in os.environ for k in SOCKET_IFNAME_VARS)  # the trainer's environment is restored
