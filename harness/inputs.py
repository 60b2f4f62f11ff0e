"""Inputs made from a seed: correctness trials and fresh inputs for every timed call.

In a comparison these seeds are the judge's secret, and so the inputs are ones the kernel
under test cannot foresee:

Trial 0 of a comparison is made from the request's own seeds, so a failure can be reproduced
from the request alone. Every later correctness trial, the recheck after timing and every
timed sample draw from a secret the server makes per pairing and sends only to the judge;
the kernel's process never sees a seed, only the values, and only once the call they belong
to has started. No input content repeats across a pairing's timed samples, whatever the
problem's size: IOContract tensors are drawn again on the device in place (their spec's
distribution, a generator seeded from the secret), ``get_inputs()`` is called again under a
seed derived from the secret.

A tensor whose spec is not random (``zeros``, ``full``, literal ``data``...) is the same in
every call by the request's own definition; :attr:`SampleInputs.note` says so when *every*
input is such.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from kernel_eval_client.io_contract import ArgSpec

from compilation.base import Arguments, ExecutableKernel
from harness.failures import out_of_memory
from harness.tensors import tensor_bytes
from io_contract.tensor_utils import drawn_as, is_float8, torch_dtype

SEED_MASK = 2**63 - 1
# SampleInputs(two_sets=True) keeps a second set of arguments up to this size
TWO_SETS_BYTES = 256 * 2**20


def derive(secret: int, *parts: object) -> int:
    """A 63-bit seed from ``secret`` and a label: unrelated to any other label's."""
    digest = hashlib.blake2b(repr((secret, *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & SEED_MASK


def trial_salt(secret: int | None, trial: int) -> int:
    """The salt of a correctness trial's seeds: none for trial 0 (the request's own seeds)."""
    if trial == 0 or secret is None:
        return 0
    return derive(secret, "trial", trial)


class SampleInputs:
    """Fresh input values for call ``i`` of a timing run, each from the secret and the run's
    number within its pairing (``reading``: a timing taken again draws inputs no earlier run
    had, so what a kernel remembered of the first run's inputs is of no use in the next).

    With an IOContract the tensors of one set of arguments are redrawn in place on the device
    (fast for inputs of gigabytes); otherwise the kernel's input code runs again under a new
    seed. :meth:`values` returns the reference's input values for call ``i``. ``two_sets``: two
    sets of arguments taken in turn (where they fit :data:`TWO_SETS_BYTES` and the device's
    memory), for a timing run that makes a call's inputs while the last call's are still read
    (:attr:`apart`).
    """

    def __init__(self, exe: ExecutableKernel, secret: int, scope: Callable[[], AbstractContextManager[Any]],
                 device: str, reading: int = 0, two_sets: bool = False) -> None:
        self.exe = exe
        self.secret = secret
        self.reading = reading
        self.scope = scope
        self.device = device
        # IOContract arguments, each with the tensors redrawn in it
        self._sets: list[tuple[Arguments, list[tuple[torch.Tensor, ArgSpec]]]] = []
        self.note: str | None = None
        if exe.io is not None:
            self._sets.append(self._arguments())
            if two_sets and tensor_bytes(self._sets[0][0].values) <= TWO_SETS_BYTES:
                try:
                    self._sets.append(self._arguments())
                except Exception as exc:  # a problem that fills the GPU keeps one set
                    if not out_of_memory(exc):
                        raise
            args, redrawn = self._sets[0]
            if not redrawn and args.input_tensors():
                self.note = ("every input tensor's content is fixed by the request (no random "
                             "init): the same inputs in every sample")
        # whether call i's values stay as they are once call i + 1's are made
        self.apart = exe.io is None or len(self._sets) > 1
        self._generator = torch.Generator(device=device if device == "cuda" else "cpu")

    def _arguments(self) -> tuple[Arguments, list[tuple[torch.Tensor, ArgSpec]]]:
        with self.scope():
            args = self.exe.make_inputs(0, derive(self.secret, "sample-shape"))
        assert args.specs is not None
        redrawn = [(value, spec) for value, spec in zip(args.values, args.specs)
                   if isinstance(value, torch.Tensor) and spec.role in ("input", "inout")
                   and spec.tensor_spec is not None and spec.tensor_spec.data is None
                   and spec.tensor_spec.init is not None
                   and spec.tensor_spec.init.kind in ("randn", "uniform")]
        return args, redrawn

    def values(self, i: int) -> list[Any]:
        """The reference's input values for timed call ``i`` (with two sets, in the set of
        ``i``'s parity: call i's values hold while call i + 1's are made)."""
        if not self._sets:
            with self.scope():
                return list(self.exe.make_inputs(1_000_000 + i, self.seed(i)).values)
        args, redrawn = self._sets[i % len(self._sets)]
        self._generator.manual_seed(self.seed(i))
        for tensor, spec in redrawn:
            redraw(tensor, spec, self._generator)
        return list(args.values)

    def seed(self, i: int) -> int:
        """The seed of timed call ``i``'s inputs."""
        return derive(self.secret, "sample", self.reading, i)


def redraw(t: torch.Tensor, spec: ArgSpec, gen: torch.Generator) -> None:
    """Fill ``t`` in place with fresh values of ``spec``'s random distribution."""
    tensor_spec = spec.tensor_spec
    assert tensor_spec is not None and tensor_spec.init is not None
    init = tensor_spec.init
    dtype = torch_dtype(tensor_spec.dtype)
    # float8 has no normal_ or uniform_: drawn in float32 and cast, as materialize_tensor does
    direct = dtype.is_floating_point and not is_float8(dtype)
    work = t if direct else torch.empty(t.shape, dtype=torch.float32, device=t.device)
    if init.kind == "randn":
        work.normal_(init.mean, init.std, generator=gen)
        if dtype == torch.bool:
            t.copy_(work > init.mean)
        elif not dtype.is_floating_point:
            t.copy_(work.round_())
    else:
        work.uniform_(init.low, init.high, generator=gen)
        if dtype == torch.bool:
            t.copy_(work >= (init.low + init.high) / 2)
        elif not dtype.is_floating_point:
            t.copy_(work.floor_())
    if is_float8(dtype):
        t.copy_(drawn_as(work, dtype))
