"""The adversarial corpus's cheats on this host, the speedup review off, and their table.

    python scripts/adversarial_corpus.py [--out DIR] [-k EXPR]
    python scripts/adversarial_corpus.py --table ROWS.jsonl [--out DIR]

Runs every cheat test of ``tests/adversarial/test_cheats.py`` (the server those tests start
has ``SPEEDUP_REVIEW_THRESHOLD`` off, so no cheat is stopped by the review flag); on a GPU host
the GPU-marked ones too, on each size. Each cheat appends its row to ``DIR/corpus_rows.jsonl``
(``tests/adversarial/outcomes.py``) and each answer to ``DIR/corpus_answers.jsonl``; then
``DIR/corpus_table.md`` holds one line per cheat: its size, what must become of it (fails,
flagged, bounded by the residual of its honest twin, or, for the older cases, caught), what
did, its published speedup and figures beside the honest twin's, and whether the
expectation was met. ``--table`` only writes the table from rows already taken. Exits with
pytest's status.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHEAT_TESTS = "test_cheat_is_caught or test_cheat_fails_is_flagged_or_stays_within_the_residual"


def run_corpus(out: Path, extra_k: str | None) -> int:
    rows, answers = out / "corpus_rows.jsonl", out / "corpus_answers.jsonl"
    for path in (rows, answers):
        path.unlink(missing_ok=True)
    k = f"({CHEAT_TESTS}) and ({extra_k})" if extra_k else CHEAT_TESTS
    env = {**os.environ, "KES_CORPUS_TABLE": str(rows), "KES_CORPUS_RECORD": str(answers),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), str(ROOT / "client"),
                                                     os.environ.get("PYTHONPATH")) if p)}
    with open(out / "corpus_pytest.log", "w", encoding="utf-8") as log:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/adversarial/test_cheats.py", "-k", k,
             "-p", "no:cacheprovider", "-q", "-rfExX", "--durations=15"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    return done.returncode


LEGEND = ("Outcome: `fails` (not a pass), `flagged` (integrity.suspicious), `bounded` (median "
          "and runtime within the residual of the honest twin's: 3% or 3 us on a GPU, 12% on the "
          "CPU), `won`. `relative`: the cheat's speedup over the honest twin's at one reference "
          "figure (the twin's median over the cheat's), with the most the residual allows. "
          "Figures in ms, median / mean (the published runtime).")
COLUMNS = ("| cheat | family | size | expect | outcome | met | speedup | honest speedup | "
           "relative | cheat ms | honest ms | note |")


def fmt(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}g}"


def line(row: dict[str, Any]) -> str:
    cheat, honest = row.get("cheat_reading") or {}, row.get("honest_reading") or {}
    relative = fmt(row.get("relative"), 3)
    if relative and row.get("allowed_relative") is not None:
        relative += f" (≤ {fmt(row['allowed_relative'], 3)})"
    note = row.get("check") or (row.get("known_win") if row.get("known_win_seen") else "") or ""
    if not row["met"] and not note:
        note = row.get("detail") or ""
    size = f"{row['size']} (n={row['n']})" if row.get("size") else ""
    cells = [row["cheat"], row["family"], size, row["expect"], row["outcome"],
             "yes" if row["met"] else "known win" if row.get("known_win_seen") else "**no**",
             fmt(cheat.get("speedup"), 3), fmt(honest.get("speedup"), 3), relative,
             f"{fmt(cheat.get('median_ms'))} / {fmt(cheat.get('mean_ms'))}" if cheat else "",
             f"{fmt(honest.get('median_ms'))} / {fmt(honest.get('mean_ms'))}" if honest else "",
             note.replace("|", "/")[:240]]
    return "| " + " | ".join(cells) + " |"


def table(rows: list[dict[str, Any]]) -> str:
    devices = sorted({r["device"] for r in rows})
    seen = [r["cheat"] for r in rows if r.get("known_win_seen")]
    missed = [r["cheat"] for r in rows if not r["met"] and not r.get("known_win_seen")]
    summary = (f"{len(rows)} cheats; expectation met by {len(rows) - len(seen) - len(missed)}; "
               f"known wins seen (expected failures): {', '.join(seen) or 'none'}; not met "
               f"otherwise: {', '.join(missed) or 'none'}.")
    head = [f"# Adversarial corpus ({', '.join(devices)}), speedup review off", "", summary, "",
            LEGEND, "", COLUMNS, "|---" * COLUMNS.count(" | ") + "|---|"]
    return "\n".join(head + [line(r) for r in rows]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/out"))
    parser.add_argument("-k", dest="k", help="a pytest -k expression narrowing the cheats")
    parser.add_argument("--table", type=Path, help="only write the table of these rows")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    status = 0
    rows_path = args.table
    if rows_path is None:
        status = run_corpus(args.out, args.k)
        rows_path = args.out / "corpus_rows.jsonl"
    rows = [json.loads(text) for text in rows_path.read_text().splitlines() if text.strip()] \
        if rows_path.exists() else []
    (args.out / "corpus_table.md").write_text(table(rows))
    print(table(rows))
    print(f"pytest exit status {status}; log {args.out / 'corpus_pytest.log'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
