"""The layout of a ``kernel-eval suite`` directory, as files and declarations.

:data:`LAYOUT_HELP` documents it; :func:`discover` reads the problems and solutions of a
directory (with their ``# kernel-eval:`` declarations, see :func:`parse_directives`),
:func:`select` filters them, and :func:`apply_small_sizes` rewrites the ``# small:`` sizes
for ``--small``. :class:`Verdict` is here because a solution declares the one it expects.
Running the solutions and reporting on them is :mod:`kernel_eval_client.suite`'s part.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from .models import KernelType

__all__ = [
    "LAYOUT_HELP",
    "LayoutError",
    "Problem",
    "Solution",
    "Verdict",
    "apply_small_sizes",
    "discover",
    "parse_directives",
    "select",
]

PROBLEM_FILE = "problem.py"
SOLUTIONS_DIR = "solutions"
DIRECTIVE = "# kernel-eval:"
SOLUTION_KEYS = ("kernel_type", "expected", "requires")
PROBLEM_KEYS = ("atol", "rtol")
LAYOUT_HELP = """\
Run every solution of a directory of KernelBench problems against the server (as /compare
jobs, as many at once as the server has worker slots), print a table and KernelBench's
fast_p: the share of runs that are correct and more than p times as fast as the reference
(fast_0 = the share that are correct), by the speedup the server reports.

layout:
  DIR/<problem>/problem.py            Model, get_inputs(), get_init_inputs(): the reference
  DIR/<problem>/solutions/<name>.py   ModelNew: one candidate (gets the reference's inputs
                                      and, without its own, its get_init_inputs())
  (DIR may also be a single problem directory)

declarations, in comment lines anywhere in a file:
  solution:  # kernel-eval: kernel_type=torch_cuda expected=incorrect requires=gpu
  problem:   # kernel-eval: atol=1e-3 rtol=1e-3
  A solution's kernel type is what it declares, else --kernel-type (default torch).
  expected= (correct|incorrect) is checked; requires=gpu skips it on a CPU-mode server,
  as are kernel types the server does not offer.

sizes:
  --small rewrites module-level lines such as 'N = 65536  # small: 64' (or
  'M, K = 8, 9  # small: 2, 3') to their small values, in the problem and in its
  solutions, before sending.

exit status: 0 every run went as expected (runs without expected= always do), 1 some run
did not, 2 bad arguments or layout, 3 some run got no verdict (server error, unreachable).
"""


class LayoutError(Exception):
    """The suite directory, a directive or a ``# small:`` marker is not as documented."""


class Verdict(str, Enum):
    """What became of one solution."""

    CORRECT = "correct"  # compiled, ran and matched the reference
    INCORRECT = "incorrect"  # ran, but its outputs differ from the reference's
    COMPILE_ERROR = "compile_error"  # did not compile or import, or its model did not build
    RUNTIME_ERROR = "runtime_error"  # raised or crashed while running
    TIMEOUT = "timeout"  # the job ran past its timeout
    REFERENCE_FAILED = "reference_failed"  # the problem itself failed; the solution never ran
    ERROR = "error"  # no verdict: the server failed or could not be reached
    SKIPPED = "skipped"  # not sent: this server cannot run it (e.g. needs a GPU)


EXPECTABLE = (Verdict.CORRECT, Verdict.INCORRECT)


@dataclass(frozen=True)
class Solution:
    """One candidate for a problem: ``<problem>/solutions/<name>.py``."""

    problem: str
    name: str
    path: Path
    source: str
    kernel_type: KernelType | None = None  # None: the suite's default
    expected: Verdict | None = None
    requires_gpu: bool = False

    @property
    def id(self) -> str:
        return f"{self.problem}/{self.name}"


@dataclass(frozen=True)
class Problem:
    """A reference (``problem.py``) and its solutions."""

    name: str
    path: Path
    source: str
    solutions: tuple[Solution, ...] = ()
    atol: float | None = None
    rtol: float | None = None


# ---- layout --------------------------------------------------------------------------------------


def discover(root: Path) -> list[Problem]:
    """The problems under ``root`` (see :data:`LAYOUT_HELP` for the layout), sorted by name."""
    if not root.is_dir():
        raise LayoutError(f"{root} is not a directory")
    if (root / PROBLEM_FILE).is_file():
        return [_load_problem(root)]
    problems = []
    for path in sorted(p for p in root.iterdir() if p.is_dir()):
        if path.name.startswith((".", "_")):
            continue
        if not (path / PROBLEM_FILE).is_file():
            raise LayoutError(
                f"{path} has no {PROBLEM_FILE}: every directory of {root} is a problem"
            )
        problems.append(_load_problem(path))
    if not problems:
        raise LayoutError(f"no problems under {root}: expected {root}/<problem>/{PROBLEM_FILE}")
    return problems


def _load_problem(path: Path) -> Problem:
    problem_file = path / PROBLEM_FILE
    source = _read(problem_file)
    directives = parse_directives(source, PROBLEM_KEYS, problem_file)
    solutions = tuple(
        _load_solution(path.name, file)
        for file in sorted((path / SOLUTIONS_DIR).glob("*.py"))
        if not file.name.startswith("_")
    )
    return Problem(
        name=path.name,
        path=path,
        source=source,
        solutions=solutions,
        atol=_float(directives, "atol", problem_file),
        rtol=_float(directives, "rtol", problem_file),
    )


def _load_solution(problem: str, path: Path) -> Solution:
    source = _read(path)
    directives = parse_directives(source, SOLUTION_KEYS, path)
    kernel_type = None
    if "kernel_type" in directives:
        try:
            kernel_type = KernelType(directives["kernel_type"])
        except ValueError:
            kinds = ", ".join(t.value for t in KernelType)
            raise LayoutError(
                f"{path}: unknown kernel_type {directives['kernel_type']!r}; one of {kinds}"
            ) from None
    expected = None
    if "expected" in directives:
        expected = next((v for v in EXPECTABLE if v.value == directives["expected"]), None)
        if expected is None:
            raise LayoutError(f"{path}: expected= must be 'correct' or 'incorrect'")
    requires = directives.get("requires")
    if requires not in (None, "gpu"):
        raise LayoutError(f"{path}: requires= must be 'gpu', got {requires!r}")
    return Solution(
        problem=problem,
        name=path.stem,
        path=path,
        source=source,
        kernel_type=kernel_type,
        expected=expected,
        requires_gpu=requires == "gpu",
    )


def parse_directives(source: str, allowed: Sequence[str], where: Path | str) -> dict[str, str]:
    """The ``key=value`` pairs of the source's ``# kernel-eval:`` comment lines."""
    found: dict[str, str] = {}
    for number, line in enumerate(source.splitlines(), 1):
        stripped = line.strip()
        if not stripped.startswith(DIRECTIVE):
            continue
        for item in stripped[len(DIRECTIVE):].split():
            key, sep, value = item.partition("=")
            if not sep or not value:
                raise LayoutError(f"{where}:{number}: expected key=value, got {item!r}")
            if key not in allowed:
                raise LayoutError(
                    f"{where}:{number}: unknown key {key!r}; allowed here: {', '.join(allowed)}"
                )
            if key in found:
                raise LayoutError(f"{where}:{number}: {key} is declared twice")
            found[key] = value
    return found


def _float(directives: dict[str, str], key: str, where: Path) -> float | None:
    if key not in directives:
        return None
    try:
        value = float(directives[key])
    except ValueError:
        raise LayoutError(f"{where}: {key}= must be a number, got {directives[key]!r}") from None
    if value < 0:
        raise LayoutError(f"{where}: {key}= must not be negative")
    return value


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LayoutError(f"cannot read {path}: {exc.strerror or exc}") from exc


def select(problems: Iterable[Problem], patterns: Sequence[str] = ()) -> list[Solution]:
    """The solutions whose id ``problem/solution`` matches one of the glob ``patterns``.

    A pattern without ``/`` is matched against the problem name alone, so ``'*softmax*'``
    keeps every solution of the softmax problems and ``'*/triton*'`` only Triton solutions.
    No patterns keep everything.
    """
    chosen = []
    for problem in problems:
        for solution in problem.solutions:
            if not patterns or any(
                fnmatch.fnmatchcase(solution.id if "/" in p else problem.name, p)
                for p in patterns
            ):
                chosen.append(solution)
    return chosen


# ---- --small -------------------------------------------------------------------------------------

_SMALL_MARKER = re.compile(r"#\s*small:")
_SMALL_LINE = re.compile(
    r"^(?P<target>[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)"
    r"(?P<annotation>\s*:\s*[^=#]+?)?"
    r"\s*=\s*(?P<full>[^#]+?)\s*#\s*small:\s*(?P<small>.+?)\s*$"
)


def apply_small_sizes(source: str) -> str:
    """``source`` with every ``NAME = full  # small: value`` line set to its small value.

    Only unindented (module-level) assignments may carry the marker, one name or a tuple of
    names (``M, N = 4096, 8192  # small: 64, 32``); anything else with a ``# small:``
    marker raises :class:`LayoutError`, as does a small value that is not an expression.
    The full value stays readable in a trailing ``# full:`` comment.
    """
    lines = source.splitlines(keepends=True)
    for index, line in enumerate(lines):
        body = line.rstrip("\r\n")
        if not _SMALL_MARKER.search(body):
            continue
        match = _SMALL_LINE.match(body)
        if match is None:
            raise LayoutError(
                f"line {index + 1}: '# small:' marks only module-level assignments "
                f"'NAME = value  # small: value', got: {body.strip()!r}"
            )
        small = match["small"]
        try:
            ast.parse(small, mode="eval")
        except SyntaxError:
            raise LayoutError(
                f"line {index + 1}: the small value {small!r} is not a Python expression"
            ) from None
        ending = line[len(body):]
        lines[index] = (
            f"{match['target']}{match['annotation'] or ''} = {small}  # full: {match['full']}"
            f"{ending}"
        )
    return "".join(lines)
