"""``kernel-eval compare-batch`` against a fake server (httpx.MockTransport)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from kernel_eval_client import cli

from .test_compare_batch import FakeServer, done, line, ndjson

REF = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"


def answer(index: int, outcome: str = "success", state: str = "completed", status: int = 200,
           median: float | None = None, **result: object) -> str:
    """A candidate's line; a ``median`` gives it timings whose mean is 1.5 times it, as the
    reference's (median 2.0, mean 3.0): the speedup is the ratio of the medians."""
    body = json.loads(line(index, state, status, outcome))
    body["response"]["kernel_exec_result"].update(result)
    if median is not None:
        body["response"]["kernel_exec_result"].update(runtime=1.5 * median, runtime_stats={
            "mean": 1.5 * median, "std": 0.1, "min": median, "max": 2 * median,
            "median": median, "percentile_95": 1.8 * median, "percentile_99": 1.9 * median,
        })
    body["response"]["ref_runtime"] = {
        "mean": 3.0, "std": 0.1, "min": 1.9, "max": 6.0, "median": 2.0, "percentile_95": 3.6,
        "percentile_99": 3.8, "num_samples": 10,
    }
    if state != "completed":
        body["response"].update(status="error", error="the job ran past its timeout of 5 s")
    return json.dumps(body)


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, Path]:
    candidates = tmp_path / "candidates"
    candidates.mkdir()
    for name in ("b.py", "a.py", "c.py"):
        (candidates / name).write_text(f"// {name}\n")
    (candidates / "notes.txt").write_text("not a kernel\n")
    (tmp_path / "ref.py").write_text(REF)
    (tmp_path / "extra.py").write_text("# extra\n")
    (tmp_path / "empty").mkdir()
    return {"dir": candidates, "ref": tmp_path / "ref.py", "extra": tmp_path / "extra.py",
            "empty": tmp_path / "empty"}


def run(server: FakeServer, *argv: str) -> int:
    return cli.main(
        [*argv, "--server", "http://kernels.test"], transport=httpx.MockTransport(server.handler)
    )


STREAM = [
    answer(2, median=0.5),
    answer(0, "incorrect", validation_error="max abs diff 0.5 at index 3\nmore detail"),
    answer(3, median=1.0),
    answer(1, "compile_error", compilation_error="SyntaxError: invalid syntax (line 1)"),
    done(4),
]


def test_prints_a_line_per_result_as_it_comes_then_a_table(
    sources: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server = FakeServer(ndjson(STREAM))

    code = run(server, "compare-batch", "--ref", str(sources["ref"]), "--custom",
               str(sources["dir"]), "--custom", str(sources["extra"]), "--trials", "7")

    out = capsys.readouterr().out.splitlines()
    body = server.body()
    names = [k["source_code"].strip() for k in body["custom_kernels"]]
    assert names == ["// a.py", "// b.py", "// c.py", "# extra"]  # sorted, .txt left out
    assert {k["kernel_type"] for k in body["custom_kernels"]} == {"torch"}
    assert body["num_trials"] == 7 and body["reuse_reference"] is True
    assert out[0].startswith("[1/4] #2 ")
    assert out[0].endswith("c.py  success  median 0.5 ms  speedup 4x")  # 2.0 / 0.5
    assert out[1].endswith("a.py  incorrect: max abs diff 0.5 at index 3")
    assert out[3].endswith("b.py  compile_error: SyntaxError: invalid syntax (line 1)")
    table = out[out.index("") + 1:]
    assert table[0].split() == ["#", "candidate", "verdict", "median", "ms", "speedup",
                                "(median)", "job"]
    assert [row.split()[0] for row in table[1:5]] == ["0", "1", "2", "3"]
    assert table[3].split()[2:5] == ["success", "0.5", "4x"]
    assert table[-1] == "4 candidates: 2 success, 1 compile_error, 1 incorrect"
    assert code == 1  # a kernel failed


def test_json_prints_the_stream_as_ndjson(
    sources: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server = FakeServer(ndjson(STREAM))

    code = run(server, "compare-batch", "--ref", str(sources["ref"]), "--custom",
               str(sources["dir"]), "--custom", str(sources["extra"]), "--json",
               "--no-reuse-reference")

    lines = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    assert [entry["index"] for entry in lines[:-1]] == [2, 0, 3, 1]
    assert lines[-1]["done"] is True and lines[-1]["count"] == 4
    assert lines[-1]["summary"]["success"] == 2
    assert server.body()["reuse_reference"] is False
    assert code == 1


@pytest.mark.parametrize(
    ("stream", "code"),
    [
        ([answer(0), answer(1), done(2)], 0),
        ([answer(0), answer(1, "timeout", "timed_out", 408), done(2)], 3),
    ],
    ids=["all-succeed", "a-job-timed-out"],
)
def test_exit_status_is_the_worst_answer(
    sources: dict[str, Path], capsys: pytest.CaptureFixture[str], stream: list[str], code: int
) -> None:
    server = FakeServer(ndjson(stream))
    a, b = sources["dir"] / "a.py", sources["dir"] / "b.py"

    assert run(server, "compare-batch", "--ref", str(sources["ref"]), "--custom", str(a),
               "--custom", str(b)) == code
    if code == 3:
        assert "timeout: the job ran past its timeout of 5 s" in capsys.readouterr().out


def test_a_directory_without_kernels_is_a_usage_error(
    sources: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server = FakeServer(ndjson(STREAM))

    code = run(server, "compare-batch", "--ref", str(sources["ref"]), "--custom",
               str(sources["empty"]))

    assert code == 2
    assert "holds no kernel source files" in capsys.readouterr().err
    assert server.requests == []


def test_a_runtime_errors_line_shows_the_exception_not_the_traceback_header(
    sources: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    traceback = (
        'Traceback (most recent call last):\n  File "kernel_custom.py", line 4, in forward\n'
        "    return launch(x)\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call.\n"
    )
    server = FakeServer(ndjson([answer(0, "runtime_error", runtime_error=traceback), done(1)]))

    code = run(server, "compare-batch", "--ref", str(sources["ref"]), "--custom",
               str(sources["dir"] / "a.py"))

    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(
        "a.py  runtime_error: RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    assert code == 1
