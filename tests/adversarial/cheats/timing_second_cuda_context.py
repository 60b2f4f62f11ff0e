"""Timing: do the work in a second CUDA context of the kernel's own process, started early.

Tries: at import the kernel starts a thread that creates a CUDA context of its own on the same
device through the driver API (``ctypes``: ``cuCtxCreate``, current on that thread only), with
a cuBLAS handle made while it is current. The first call tells the thread where the inputs
live (the arena's slots, the same every call) and gets an output tensor the thread writes.
From then on the thread watches the inputs from its own context (64 bytes at the head of
``a`` and the tail of ``b``, every 20 us): as soon as the judge writes new ones, before it has
even asked for the call, the thread copies them into its context's memory (``cuMemcpyPeer``),
multiplies there (``cublasSgemm``) and copies the product back into the output. The call
itself only asks the thread to confirm that the output holds the product of the inputs there
now (computing it if not), which it does under the timer's GPU sleep lead: the primary
context's CUDA events around the call see none of the work. (Run synchronously inside the
call, the second context gains nothing: contexts time-slice the GPU, so its work waits for
the lead to end and the events see it all, with the switches on top: in a simulation of the
handover on an H100, a 2048 float32 matmul read 1.10 ms that way against 0.35 ms honest, and
0.0012 ms started early, with every output right.)
Caught by: the judge's clock, which runs from handing the inputs over until it holds the
outputs, wherever and whenever they were made: every published figure is that clock's.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
import ctypes
import threading
import time

_cu = ctypes.CDLL("libcuda.so.1")
_u64, _p = ctypes.c_uint64, ctypes.c_void_p
_cu.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
_cu.cuCtxCreate_v2.argtypes = [ctypes.POINTER(_p), ctypes.c_uint, ctypes.c_int]
_cu.cuCtxSetCurrent.argtypes = [_p]
_cu.cuCtxSynchronize.argtypes = []
_cu.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(_p), ctypes.c_int]
_cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(_u64), ctypes.c_size_t]
_cu.cuMemFree_v2.argtypes = [_u64]
_cu.cuMemcpyPeer.argtypes = [_u64, _p, _u64, _p, ctypes.c_size_t]
_cu.cuMemcpyDtoH_v2.argtypes = [_p, _u64, ctypes.c_size_t]

_PRINT = 64  # bytes read at the head of a and the tail of b: the inputs' fingerprint
_SETTLE_S = 50e-6  # after a change is seen, for the judge's copy to finish
_POLL_S = 20e-6


def _check(status, what):
    if status != 0:
        raise RuntimeError(f"{what}: CUDA error {status}")


def _cublas():
    with open("/proc/self/maps") as maps:  # the cuBLAS torch already loaded
        for line in maps:
            path = line.split()[-1]
            if "/libcublas.so" in path:
                return ctypes.CDLL(path)
    for name in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    raise OSError("no cuBLAS")


_blas = _cublas()
_blas.cublasCreate_v2.argtypes = [ctypes.POINTER(_p)]
_blas.cublasSgemm_v2.argtypes = [
    _p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
    ctypes.POINTER(ctypes.c_float), _u64, ctypes.c_int, _u64, ctypes.c_int,
    ctypes.POINTER(ctypes.c_float), _u64, ctypes.c_int]


def _pause(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        time.sleep(0)  # lets the main thread have the GIL


class _Hidden:
    # A thread whose current CUDA context is its own, never the primary one. Once it knows
    # where the inputs live it watches them, and multiplies as soon as new ones appear.

    def __init__(self, device):
        self.device = device
        self.ready, self.asked, self.done = (threading.Event() for _ in range(3))
        self.pending = self.slots = self.computed = self.error = None
        self.buffers = {}
        threading.Thread(target=self.serve, daemon=True).start()
        self.ready.wait()
        if self.error is not None:
            raise self.error

    def buffer(self, name, nbytes):
        held = self.buffers.get(name)
        if held is None or held[1] < nbytes:
            if held is not None:
                _cu.cuMemFree_v2(held[0])
            ptr = _u64()
            _check(_cu.cuMemAlloc_v2(ctypes.byref(ptr), nbytes), "cuMemAlloc")
            held = self.buffers[name] = (ptr.value, nbytes)
        return held[0]

    def setup(self):
        dev = ctypes.c_int()
        _check(_cu.cuDeviceGet(ctypes.byref(dev), self.device), "cuDeviceGet")
        self.primary = _p()
        _check(_cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.primary), dev.value),
               "cuDevicePrimaryCtxRetain")
        self.ctx = _p()
        _check(_cu.cuCtxCreate_v2(ctypes.byref(self.ctx), 0, dev.value), "cuCtxCreate")
        _check(_cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        self.handle = _p()
        _check(_blas.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        self.head, self.tail = (ctypes.c_char * _PRINT)(), (ctypes.c_char * _PRINT)()

    def serve(self):
        try:
            self.setup()
        except BaseException as exc:
            self.error = exc
            self.ready.set()
            return
        self.ready.set()
        while True:
            if self.slots is None:
                self.asked.wait()
            if self.asked.is_set():
                self.asked.clear()
                try:
                    self.answer()
                except BaseException as exc:
                    self.error = exc
                self.done.set()
                continue
            try:
                self.watch()
            except BaseException as exc:  # reported at the next call
                self.error, self.slots = exc, None

    def fingerprint(self):
        a, b, _, m, k, n = self.slots
        _check(_cu.cuMemcpyDtoH_v2(self.head, a, _PRINT), "reading a")
        _check(_cu.cuMemcpyDtoH_v2(self.tail, b + k * n * 4 - _PRINT, _PRINT), "reading b")
        return self.head.raw + self.tail.raw

    def answer(self):
        # the call: the output must hold the product of the inputs there now
        if self.pending is not None:
            self.slots, self.pending, self.computed = self.pending, None, None
        seen = self.fingerprint()
        if seen != self.computed:
            self.multiply()
            self.computed = seen

    def watch(self):
        # between calls: new inputs (the judge writes them before it asks) are multiplied at once
        seen = self.fingerprint()
        if seen == self.computed:
            _pause(_POLL_S)
            return
        _pause(_SETTLE_S)
        seen = self.fingerprint()
        self.multiply()
        self.computed = seen

    def multiply(self):
        a, b, out, m, k, n = self.slots
        A, B, C = self.buffer("a", m * k * 4), self.buffer("b", k * n * 4), self.buffer("c", m * n * 4)
        _check(_cu.cuMemcpyPeer(A, self.ctx, a, self.primary, m * k * 4), "copy a in")
        _check(_cu.cuMemcpyPeer(B, self.ctx, b, self.primary, k * n * 4), "copy b in")
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        # row-major C = A @ B is column-major C^T = B^T @ A^T
        _check(_blas.cublasSgemm_v2(self.handle, 0, 0, n, m, k, ctypes.byref(one), B, n, A, k,
                                    ctypes.byref(zero), C, n), "cublasSgemm")
        _check(_cu.cuMemcpyPeer(out, self.primary, C, self.ctx, m * n * 4), "copy c out")
        _check(_cu.cuCtxSynchronize(), "cuCtxSynchronize")

    def __call__(self, slots):
        self.error = None
        if self.slots is None or self.slots != slots:
            self.pending = slots
        self.done.clear()
        self.asked.set()
        self.done.wait()
        if self.error is not None:
            raise self.error


_hidden = _Hidden(torch.cuda.current_device())
_out = {}


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        if a.dtype != torch.float32 or not (a.is_contiguous() and b.is_contiguous()):
            return torch.matmul(a, b)
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        where = (a.data_ptr(), b.data_ptr(), m, k, n)
        out = _out.get(where)  # the same output every call: the thread writes it
        if out is None:
            out = _out[where] = torch.empty(m, n, device=a.device, dtype=a.dtype)
        _hidden((a.data_ptr(), b.data_ptr(), out.data_ptr(), m, k, n))
        return out
"""

CASE = Cheat(
    name="work_in_a_second_cuda_context",
    family=Family.TIMING,
    technique="hidden_context",
    tries="multiplies with cuBLAS in a second CUDA context (cuCtxCreate through ctypes, on a "
          "thread of its own) as soon as the judge writes the inputs, before the call",
    caught_by="the judge's clock from inputs handed over to outputs held",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
    gpu=True,
)
