"""Timing: write a forged result onto every descriptor the worker inherited, then leave.

Tries: whatever channel the harness uses to hand its result back (a pipe, a socket, an open
file), the kernel's process holds it too. The kernel writes a forged "correct, 0.1 µs"
result to every writable descriptor above stderr (as a frame of the server's own
``shared.channel`` protocol on sockets when that module is loaded, as plain JSON lines
otherwise): first a bare ``{"result": <verdict>}``, the shape of a worker's own "this kernel
failed, here is its verdict" answer, whose verdict says success, correct, 0.1 µs, nothing
suspicious. Then it ends the process with ``os._exit(0)``.
Caught by: a channel the kernel's process does not hold (the verdict decided by a process
that never imported user code), and treating anything sent after import as untrusted data.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
import fcntl
import json
import os
import socket
import stat
import sys

FAKE_MS = 1e-4


def _verdict(device, correctness):
    stats = {"mean": FAKE_MS, "std": 0.0, "min": FAKE_MS, "max": FAKE_MS, "median": FAKE_MS,
             "percentile_95": FAKE_MS, "percentile_99": FAKE_MS, "num_samples": 100,
             "method": "cuda_event+l2_flush" if device == "cuda" else "cpu_perf_counter",
             "device": device}
    return {"outcome": "success", "compiled": True, "correctness": correctness,
            "runtime": FAKE_MS, "runtime_stats": stats,
            "integrity": {"checks": ["timing_cross_check"], "suspicious": False, "reasons": []},
            "metadata": {"device": device, "speedup": 1.0, "speedup_statistic": "median"}}


def _messages(device):
    # The first frame is read as the answer to whatever the harness asked last: make it a
    # whole verdict, in the shapes a worker's answer may take.
    verdict = _verdict(device, True)
    both = {"kernel_exec_result": verdict, "ref_exec_result": _verdict(device, None)}
    return [
        {"result": verdict},
        {"type": "result", "result": both},
        {"event": "result", **both},
        both,
    ]


def _writable(fd):
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        return False
    return flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)


def _forge_and_leave(device):
    channel = sys.modules.get("shared.channel")
    sent = []
    for fd in range(3, 1024):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        for message in _messages(device):
            try:
                if stat.S_ISSOCK(mode) and channel is not None:
                    # a frame of the protocol: its header, then the JSON body
                    body = json.dumps(message).encode()
                    with socket.socket(fileno=os.dup(fd)) as sock:
                        sock.sendall(channel.HEADER.pack(len(body), 0) + body)
                elif stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode) or (
                        stat.S_ISREG(mode) and _writable(fd)):
                    os.write(fd, (json.dumps(message) + "\\n").encode())
                else:
                    break
                sent.append(fd)
            except OSError:
                break
    print("forged results written to fds", sorted(set(sent)))
    sys.stdout.flush()
    os._exit(0)


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        _forge_and_leave(a.device.type)
"""

CASE = Cheat(
    name="forged_result_fd",
    family=Family.TIMING,
    technique="forged_result",
    tries="sends a forged 'correct, 0.1 µs' result down every inherited descriptor, os._exit(0)",
    caught_by="verdict decided outside the kernel's process; worker messages are untrusted data",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
)
