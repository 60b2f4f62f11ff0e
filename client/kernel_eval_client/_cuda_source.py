"""The names of a CUDA C++ source's ``__global__`` kernels, read without compiling it.

The same reading as the cuda backend's parser (``compilation/cuda_backend.find_kernels``),
without parameter lists: enough for a request to be refused when it must name the kernel to
launch and does not. A test checks that the two agree.
"""

from __future__ import annotations

import re

_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"', re.DOTALL)
_ATTRIBUTES = {
    "__launch_bounds__",
    "__attribute__",
    "__declspec",
    "alignas",
    "__cluster_dims__",
    "__maxnreg__",
}


def cuda_kernel_names(source: str) -> list[str]:
    """The names of the ``__global__`` functions of ``source``, in order, each once."""
    text = _COMMENT_OR_STRING.sub(
        lambda m: m[0] if m[0].startswith('"') else re.sub(r"[^\n]", " ", m[0]), source
    )
    names: list[str] = []
    for match in re.finditer(r"\b__global__\b", text):
        start = match.end()
        while (paren := text.find("(", start)) >= 0:
            head = text[start:paren]
            ident = re.search(r"([A-Za-z_]\w*)\s*$", head)
            if re.search(r"[;{}#]", head) or ident is None:
                break  # not a function declaration (a macro, say)
            if ident[1] not in _ATTRIBUTES:
                if ident[1] not in names:
                    names.append(ident[1])
                break
            start = _closing_paren(text, paren) + 1  # skip __launch_bounds__(...) and the like
    return names


def _closing_paren(text: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return len(text)
