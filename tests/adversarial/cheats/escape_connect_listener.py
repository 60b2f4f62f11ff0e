"""Escape: open a connection to anything on the network (here: listeners the test owns).

Arranged: the test opens a TCP listener and a UDP socket on 127.0.0.1 (and a TCP listener
on ::1 where IPv6 is available); for safety no other address is ever used.
Tries: connect to each and send a token: the same call would reach any host the server's
machine can reach, to exfiltrate a secret or fetch a payload.
Caught by: a network namespace of the worker's own (no network unless the operator allows
it). No connection or datagram may arrive.
"""

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.adversarial.corpus import AttackRun, Escape, Job, Target, escape_job, fill

ATTACK = """
import socket

TOKEN = @TOKEN@
TCP = @TCP@
UDP = @UDP@


def attack():
    results = []
    for family, host, port in TCP:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.settimeout(3)
                s.connect((host, port))
                s.sendall(TOKEN)
            results.append(f"CONNECTED tcp {host}:{port}")
        except OSError as exc:
            results.append(f"tcp {host}:{port} blocked: {exc}")
    for host, port in UDP:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(TOKEN, (host, port))
            results.append(f"sent udp {host}:{port}")
        except OSError as exc:
            results.append(f"udp {host}:{port} blocked: {exc}")
    return "; ".join(results)
"""


@dataclass
class Listeners:
    tcp: list[socket.socket] = field(default_factory=list)
    udp: socket.socket | None = None
    accepted: list[str] = field(default_factory=list)
    received: list[bytes] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def accept_forever(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, peer = listener.accept()
            except OSError:
                return
            self.accepted.append(f"connection from {peer}")
            with conn:
                conn.settimeout(2)
                try:
                    data = conn.recv(256)
                except OSError:
                    data = b""
            self.received.append(data)


def arrange(client: httpx.Client, target: Target) -> Listeners:
    state = Listeners()
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
            s.bind((host, 0))
        except OSError:
            continue  # no IPv6 here
        s.listen(8)
        state.tcp.append(s)
        t = threading.Thread(target=state.accept_forever, args=(s,), daemon=True)
        t.start()
        state.threads.append(t)
    state.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    state.udp.bind(("127.0.0.1", 0))
    state.udp.settimeout(0.5)
    return state


def attack(target: Target, state: Listeners) -> Job:
    tcp = [(int(s.family), *s.getsockname()[:2]) for s in state.tcp]
    assert state.udp is not None
    udp = [state.udp.getsockname()]
    token = repr(f"escape-{target.token}".encode())
    return escape_job("connect_listener", fill(ATTACK, TOKEN=token, TCP=repr(tcp), UDP=repr(udp)))


def verify(client: httpx.Client, target: Target, state: Listeners, run: AttackRun) -> list[str]:
    if "CONNECTED" in run.text:  # let the accepting thread record it
        deadline = time.monotonic() + 2
        while not state.accepted and time.monotonic() < deadline:
            time.sleep(0.05)
    breaches = [f"TCP {a} (the kernel's), data {state.received}" for a in state.accepted]
    assert state.udp is not None
    try:
        data, peer = state.udp.recvfrom(256)
        breaches.append(f"UDP datagram arrived from the kernel: {peer} {data!r}")
    except OSError:
        pass
    return breaches


def cleanup(target: Target, state: Any) -> None:
    if state is None:
        return
    for s in [*state.tcp, state.udp]:
        if s is None:
            continue
        try:
            s.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        except OSError:
            pass
        s.close()


CASE = Escape(
    name="connect_listener",
    technique="network",
    tries="TCP to 127.0.0.1/::1 listeners and a UDP datagram, all owned by the test",
    caught_by="network namespace: no network for workers unless the operator allows it",
    arrange=arrange,
    attack=attack,
    verify=verify,
    cleanup=cleanup,
)
