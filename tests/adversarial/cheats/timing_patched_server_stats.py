"""Timing: find the server's own statistics and timing functions in ``sys.modules`` and
shrink what they return.

Tries: every loaded module of the server's packages (``profiling``, ``validation``,
``subprocess_worker``, ``orchestration``, ``shared``) has its ``summarize``/``time_kernel``/
``_time_*`` functions wrapped to return figures four times smaller (below the 10x speedup
review), and the ``RuntimeStats`` model (wherever it is defined) shrinks its fields on construction.
Caught by: computing the statistics outside the process that imported user code, from
timestamps that process cannot rewrite.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
import sys

_FIELDS = ("mean", "std", "min", "max", "median", "percentile_95", "percentile_99")
_PACKAGES = ("profiling", "validation", "subprocess_worker", "orchestration", "shared",
             "kernel_eval_client")


def _shrink(value):
    if isinstance(value, float):
        return value * 0.25
    if isinstance(value, list) and value and all(isinstance(v, float) for v in value):
        return [v * 0.25 for v in value]
    if hasattr(value, "model_copy") and hasattr(value, "median"):
        return value.model_copy(update={f: getattr(value, f) * 0.25 for f in _FIELDS
                                        if isinstance(getattr(value, f, None), float)})
    return value


def _wrap(fn):
    def wrapper(*args, **kwargs):
        return _shrink(fn(*args, **kwargs))
    wrapper.__wrapped__ = fn
    return wrapper


def _wanted(name):
    return name in ("summarize", "time_kernel") or name.startswith("_time_")


patched = []
for _name, _module in list(sys.modules.items()):
    if _module is None or not _name.split(".")[0] in _PACKAGES:
        continue
    for _attr, _value in list(vars(_module).items()):
        if callable(_value) and _wanted(_attr) and not hasattr(_value, "__wrapped__"):
            setattr(_module, _attr, _wrap(_value))
            patched.append(f"{_name}.{_attr}")
        is_stats = _attr == "RuntimeStats" and isinstance(_value, type)
        if is_stats and not getattr(_value, "_shrunk", False):
            _real_init = _value.__init__

            def _init(self, *args, _real_init=_real_init, **kwargs):
                for f in _FIELDS:
                    if isinstance(kwargs.get(f), float):
                        kwargs[f] = kwargs[f] * 0.25
                _real_init(self, *args, **kwargs)

            _value.__init__ = _init
            _value._shrunk = True
            patched.append(f"{_name}.RuntimeStats")
print("patched:", ", ".join(patched))


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
"""

CASE = Cheat(
    name="patched_server_stats",
    family=Family.TIMING,
    technique="patched_stats",
    tries="wraps the server's summarize/time_kernel and RuntimeStats found in sys.modules",
    caught_by="statistics computed outside the kernel's process",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
)
