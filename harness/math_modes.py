"""The math modes torch runs a call under, read in the process that runs it.

:class:`ModeReader` binds torch's own getters and setters while the process is still clean
(with the timer: :func:`harness.timer.bind`). :meth:`ModeReader.read` reads the modes; a flag
torch will not read says why (it refuses a TF32 flag set through both its older and its newer
API; the newer one is read then). :meth:`ModeReader.watching` records the setters a call
invokes while it runs: a kernel that switches TF32 on inside its forward and back off before
it returns leaves the modes before and after the call as they were.

Each setting is recorded once, as ``flag=value`` with ``flag`` a
:class:`shared.protocol.MathModes` field, in the order first made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from shared.observations import TRACE_MODES_SET, MathModes

UNREADABLE_CHARS = 200
SETTING_CHARS = 80
# the newer API's precisions, as the older API's flags
_PRECISION_ON = {"tf32": True, "ieee": False}


def _on(value: Any) -> list[tuple[str, Any]]:
    return [("", bool(value))]


def _first_on(value: Any, *rest: Any) -> list[tuple[str, Any]]:
    return [("", bool(value))]


def _precision(value: Any) -> list[tuple[str, Any]]:
    return [("", str(value))]


def _fp32_precision(backend: Any, op: Any, value: Any) -> list[tuple[str, Any]]:
    """What torch's newer setter (backend, op, precision) switches, as MathModes flags."""
    on = _PRECISION_ON.get(str(value))
    if on is None:
        return []
    if backend == "generic":
        return [("matmul_tf32", on), ("cudnn_tf32", on)]
    if backend == "cuda":
        return [("matmul_tf32" if op == "matmul" else "cudnn_tf32", on)]
    return []


# torch._C setters, looked up at each call by torch's own Python API: (name, flag, decode);
# decode gives (flag or "" for this one's, value) pairs from the setter's arguments
_SETTERS: tuple[tuple[str, str, Callable[..., list[tuple[str, Any]]]], ...] = (
    ("_set_cublas_allow_tf32", "matmul_tf32", _on),
    ("_set_cudnn_allow_tf32", "cudnn_tf32", _on),
    ("_set_float32_matmul_precision", "float32_matmul_precision", _precision),
    ("_set_cublas_allow_fp16_reduced_precision_reduction", "fp16_reduced_precision_reduction",
     _first_on),
    ("_set_cublas_allow_bf16_reduced_precision_reduction", "bf16_reduced_precision_reduction",
     _first_on),
    ("_set_cublas_allow_fp16_accumulation", "fp16_accumulation", _on),
    ("_set_fp32_precision_setter", "", _fp32_precision),
)


def _cudnn_precision(value: Any) -> list[tuple[str, Any]]:
    return _fp32_precision("cuda", "all", value)


def _generic_precision(value: Any) -> list[tuple[str, Any]]:
    return _fp32_precision("generic", "all", value)


# properties that hold a setter bound when torch was imported: (module, attribute, flag, decode)
_PROPERTIES: tuple[tuple[str, str, str, Callable[..., list[tuple[str, Any]]]], ...] = (
    ("cudnn", "allow_tf32", "cudnn_tf32", _on),
    ("cudnn", "fp32_precision", "", _cudnn_precision),
    ("", "fp32_precision", "", _generic_precision),
)


class ModeReader:
    """torch's math-mode getters and setters, bound when made (see the module docstring)."""

    def __init__(self) -> None:
        import torch

        c = torch._C
        self._c = c
        self._get = {name: getattr(c, name, None) for name in (
            "_get_cublas_allow_tf32", "_get_cudnn_allow_tf32", "_get_float32_matmul_precision",
            "_get_cublas_allow_fp16_reduced_precision_reduction",
            "_get_cublas_allow_bf16_reduced_precision_reduction",
            "_get_cublas_allow_fp16_accumulation", "_get_fp32_precision_getter")}
        self._props: list[tuple[Any, str, Callable[..., list[tuple[str, Any]]]]] = []
        for module, attribute, flag, decode in _PROPERTIES:
            holder = getattr(torch.backends, module) if module else torch.backends
            prop = vars(type(holder)).get(attribute)
            if prop is not None and callable(getattr(prop, "setter", None)):
                self._props.append((prop, flag, decode))

    def read(self) -> MathModes:
        """The modes now; a flag that cannot be read is None, with why in ``unreadable``."""
        modes = MathModes()
        reads: dict[str, Callable[[], Any]] = {
            "matmul_tf32": lambda: self._tf32("_get_cublas_allow_tf32", "matmul"),
            "cudnn_tf32": lambda: self._tf32("_get_cudnn_allow_tf32", "conv"),
            "float32_matmul_precision": lambda: str(self._call("_get_float32_matmul_precision")),
            "fp16_reduced_precision_reduction": lambda: _first(
                self._call("_get_cublas_allow_fp16_reduced_precision_reduction")),
            "bf16_reduced_precision_reduction": lambda: _first(
                self._call("_get_cublas_allow_bf16_reduced_precision_reduction")),
            "fp16_accumulation": lambda: bool(self._call("_get_cublas_allow_fp16_accumulation")),
        }
        for flag, read in reads.items():
            try:
                setattr(modes, flag, read())
            except Exception as exc:  # noqa: BLE001 - an unreadable flag is said, not raised
                modes.unreadable[flag] = f"{type(exc).__name__}: {exc}"[:UNREADABLE_CHARS]
        return modes

    def _call(self, name: str, *args: Any) -> Any:
        getter = self._get.get(name)
        if getter is None:
            raise LookupError(f"this torch has no torch._C.{name}")
        return getter(*args)

    def _tf32(self, legacy: str, op: str) -> bool:
        """A TF32 flag by torch's older getter, else by its newer API's precision."""
        try:
            return bool(self._call(legacy))
        except Exception:  # both APIs were used: the newer one says
            precision = str(self._call("_get_fp32_precision_getter", "cuda", op))
            if precision == "none":
                precision = str(self._call("_get_fp32_precision_getter", "generic", "all"))
            if precision not in _PRECISION_ON:
                raise
            return _PRECISION_ON[precision]

    @contextmanager
    def watching(self) -> Iterator[list[str]]:
        """Record every setting (``flag=value``, each once, in the order first made) the block
        makes through torch's math-mode setters; the setters are put back after."""
        seen: list[str] = []
        c = self._c
        replaced: list[tuple[Any, str, Any]] = []

        def watched(original: Callable[..., Any], flag: str,
                    decode: Callable[..., list[tuple[str, Any]]]) -> Callable[..., Any]:
            def setter(*args: Any, **kwargs: Any) -> Any:
                with suppress(Exception):
                    for name, value in decode(*args):
                        setting = f"{name or flag}={value}"[:SETTING_CHARS]
                        if setting not in seen and len(seen) < TRACE_MODES_SET:
                            seen.append(setting)
                return original(*args, **kwargs)
            return setter

        def install(owner: Any, attribute: str, flag: str,
                    decode: Callable[..., list[tuple[str, Any]]]) -> None:
            current = getattr(owner, attribute, None)
            if current is None:
                return
            with suppress(Exception):  # (a process whose torch will not be patched is not seen)
                setattr(owner, attribute, watched(current, flag, decode))
                replaced.append((owner, attribute, current))

        try:
            for name, flag, decode in _SETTERS:
                install(c, name, flag, decode)
            for prop, flag, decode in self._props:
                install(prop, "setter", flag, decode)
            yield seen
        finally:
            for owner, attribute, value in reversed(replaced):
                with suppress(Exception):
                    setattr(owner, attribute, value)


def _first(value: Any) -> bool:
    """A cuBLAS reduction flag: a bool, or (allow, allow split-K) in newer torch."""
    return bool(value[0] if isinstance(value, tuple) else value)
