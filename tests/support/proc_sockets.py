"""TCP sockets of a process tree, read from /proc (Linux), like `ss -tanp` but scoped.

Used to check that a local Ray cluster keeps its traffic on loopback. No psutil: it is
not a dependency of the project.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

_LISTEN = "0A"


@dataclass(frozen=True)
class Sock:
    pid: int
    process: str
    local: tuple[str, int]
    remote: tuple[str, int]
    listening: bool

    def beyond_loopback(self) -> bool:
        ips = [self.local[0]] if self.listening else [self.local[0], self.remote[0]]
        return not all(_is_loopback(ip) for ip in ips)


def _is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


def _decode(hex_address: str) -> tuple[str, int]:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:  # four 32-bit words, each in host (little-endian) order
        words = struct.unpack("<4I", raw)
        ip = socket.inet_ntop(socket.AF_INET6, struct.pack(">4I", *words))
    return ip, int(port, 16)


def _tcp_table() -> dict[int, tuple[tuple[str, int], tuple[str, int], bool]]:
    table = {}
    for name in ("tcp", "tcp6"):
        path = Path("/proc/self/net") / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], int(fields[9])
            table[inode] = (_decode(local), _decode(remote), state == _LISTEN)
    return table


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return kids


def process_tree(root: int | None = None) -> list[int]:
    todo, seen = [root or os.getpid()], []
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo += _children(pid)
    return seen


def tree_sockets(root: int | None = None) -> list[Sock]:
    """Every TCP socket held by `root` (default: this process) and its descendants."""
    table = _tcp_table()
    found = []
    for pid in process_tree(root):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:  # gone meanwhile
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                entry = table.get(int(target[8:-1]))
                if entry:
                    found.append(Sock(pid, name, entry[0], entry[1], entry[2]))
    return found


def processes_named(name: str) -> set[int]:
    pids = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "comm").read_text().strip() == name:
                pids.add(int(proc.name))
        except OSError:
            continue
    return pids
