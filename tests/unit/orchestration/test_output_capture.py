"""OutputCapture keeps a bounded head and tail of a stream; pump reads a pipe to EOF in chunks."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from orchestration.output_capture import OutputCapture, pump


def fed(data: bytes, head: int, tail: int, step: int = 7) -> OutputCapture:
    capture = OutputCapture(head_bytes=head, tail_bytes=tail)
    for i in range(0, len(data), step):
        capture.feed(data[i : i + step])
    return capture


def test_short_output_is_kept_whole() -> None:
    capture = fed(b"hello\nworld\n", head=100, tail=100)
    assert capture.text() == "hello\nworld\n"
    assert (capture.total_bytes, capture.omitted_bytes) == (12, 0)


def test_long_output_keeps_head_and_tail_and_counts_the_rest() -> None:
    data = bytes(range(48, 58)) * 100  # "0123456789" * 100, 1000 bytes
    capture = fed(data, head=25, tail=30)
    assert capture.total_bytes == 1000 and capture.kept_bytes == 55
    assert capture.omitted_bytes == 945
    text = capture.text()
    head, marker, tail = text.split("\n")
    assert head == data[:25].decode()
    assert marker == "[... 945 bytes omitted ...]"
    assert tail == data[-30:].decode()


def test_output_exactly_filling_head_and_tail_omits_nothing() -> None:
    data = b"a" * 10 + b"b" * 10
    capture = fed(data, head=10, tail=10, step=3)
    assert capture.omitted_bytes == 0 and capture.text() == data.decode()


def test_memory_stays_bounded_whatever_is_fed() -> None:
    capture = OutputCapture(head_bytes=1000, tail_bytes=1000)
    for _ in range(10_000):
        capture.feed(b"x" * 997)
        assert len(capture._head) + len(capture._tail) <= 3000
    assert capture.total_bytes == 9_970_000


@pytest.mark.parametrize("step", [1, 5, 64])
def test_tail_returns_the_last_bytes(step: int) -> None:
    data = b"".join(b"line %03d\n" % i for i in range(200))  # 9 bytes a line
    capture = fed(data, head=50, tail=100, step=step)
    assert capture.tail(18) == "line 198\nline 199\n"
    assert capture.tail(1000) == data[-100:].decode()  # never more than was kept
    assert capture.tail(0) == ""


def test_tail_of_short_output_spans_the_head() -> None:
    capture = fed(b"abcdefghij", head=6, tail=100)
    assert capture.tail(8) == "cdefghij"


def test_zero_tail_keeps_only_the_head() -> None:
    capture = fed(b"0123456789", head=4, tail=0)
    assert capture.text() == "0123\n[... 6 bytes omitted ...]\n"
    assert capture.tail(3) == ""


def test_a_multibyte_character_cut_at_the_boundary_does_not_break_decoding() -> None:
    capture = fed("é".encode() * 10, head=3, tail=3, step=1)
    assert capture.text().startswith("é")  # the half character becomes U+FFFD, no exception


def test_save_writes_the_kept_text(tmp_path: Path) -> None:
    capture = fed(b"x" * 100, head=10, tail=10)
    path = tmp_path / "worker.log"
    capture.save(path)
    assert path.read_text() == capture.text()
    assert "[... 80 bytes omitted ...]" in path.read_text()


def test_negative_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        OutputCapture(head_bytes=-1)


FLOOD = (
    "import sys\n"
    "line = b'y' * (500 * 1024 - 1) + b'\\n'\n"
    "for _ in range(200):\n"
    "    sys.stdout.buffer.write(line)\n"
    "sys.stdout.buffer.flush()\n"
    "sys.stderr.write('done\\n')\n"
)


async def _run_flood(capture_out: OutputCapture, capture_err: OutputCapture) -> int:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FLOOD,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    await asyncio.gather(pump(proc.stdout, capture_out), pump(proc.stderr, capture_err))
    return await proc.wait()


def test_a_process_printing_100_mb_in_500_kb_lines_is_never_blocked() -> None:
    out, err = OutputCapture(), OutputCapture()
    # The deadline only guards against a hang (a blocked writer never exits); the run itself
    # takes well under a second.
    code = asyncio.run(asyncio.wait_for(_run_flood(out, err), timeout=120))
    assert code == 0
    assert out.total_bytes == 200 * 500 * 1024
    assert out.kept_bytes == 1024 * 1024
    assert out.omitted_bytes == 200 * 500 * 1024 - 1024 * 1024
    assert len(out.text()) < 1024 * 1024 + 100
    assert err.text() == "done\n"


def test_pump_reads_past_a_line_longer_than_the_stream_limit() -> None:
    async def run() -> OutputCapture:
        reader = asyncio.StreamReader(limit=1024)
        reader.feed_data(b"z" * 100_000 + b"\nend\n")
        reader.feed_eof()
        capture = OutputCapture(head_bytes=10, tail_bytes=10)
        await pump(reader, capture, chunk=4096)
        return capture

    capture = asyncio.run(run())
    assert capture.total_bytes == 100_005
    assert capture.tail(4) == "end\n"
