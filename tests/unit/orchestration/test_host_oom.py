"""A job process the host's OOM killer ended is reported as that, with the memory it had used
(orchestration.executor._host_oom), not as a bare 'killed by signal SIGKILL'."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from orchestration.executor import _host_oom


@dataclass
class Ended:
    status: int | None
    killed: bool
    max_rss_bytes: int = 0


def killed_by(sig: int) -> int:
    return sig  # a wait status for "terminated by signal sig" (no core dump)


def test_a_sigkill_the_server_did_not_send_is_the_hosts_oom_killer_with_the_memory_used() -> None:
    text = _host_oom([Ended(killed_by(signal.SIGKILL), killed=False, max_rss_bytes=3 * 2**30)])
    assert "ran out of memory" in text and "3.00 GiB" in text


def test_a_sigkill_the_server_sent_or_another_ending_says_nothing_of_memory() -> None:
    assert _host_oom([Ended(killed_by(signal.SIGKILL), killed=True)]) == ""
    assert _host_oom([Ended(killed_by(signal.SIGSEGV), killed=False)]) == ""
    assert _host_oom([Ended(0, killed=False), Ended(None, killed=False)]) == ""
