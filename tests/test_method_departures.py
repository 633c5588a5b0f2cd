"""docs/method.md's table of departures: every line of Algorithms 1 and 2 has its row, every option a row names is a
flag of `cader eval`, and every departure the paper-values module names has its row."""

import re
from dataclasses import fields
from pathlib import Path

from cader.contracts.paper import DEPARTURES
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.run_options import RunOptions

PAGE = Path(__file__).resolve().parents[1] / "docs" / "method.md"
# The lines of Algorithm 1 and 2 (supplementary E) that do something: inputs, outputs and comments left out.
ALGORITHM_LINES = {1: set(range(5, 13)) | set(range(15, 41)), 2: set(range(3, 25)) - {13}}


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the page's departures table (header and rule left out)."""
    section = text.split("## Departures", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def cited_lines(cell: str) -> dict[int, set[int]]:
    """{algorithm: {line, ...}} of a row's paper cell: "Alg. 1 l. 15–17, 20; C.2" -> {1: {15, 16, 17, 20}}."""
    cited: dict[int, set[int]] = {}
    for algorithm, spans in re.findall(r"Alg\. (\d) l\. ([\d–, ]+)", cell):
        for span in spans.split(","):
            if span.strip():
                first, _, last = span.strip().partition("–")
                cited.setdefault(int(algorithm), set()).update(range(int(first), int(last or first) + 1))
    return cited


def named_options(cell: str) -> list[str]:
    return re.findall(r"`--([a-z_]+)", cell)


def test_cited_lines_and_options_are_read_from_cells():
    assert cited_lines("Alg. 1 l. 15–17, 20; C.2") == {1: {15, 16, 17, 20}}
    assert cited_lines("Alg. 2 l. 24") == {2: {24}} and cited_lines("App. A") == {}
    assert named_options("`--frame_rule bin_centre`; `--max_frames`") == ["frame_rule", "max_frames"]
    rows = table_rows("# t\n## Departures\n\n| a | b |\n|---|---|\n| x | `--y 1` |\n\n## Next\n| c | d |\n")
    assert rows == [["x", "`--y 1`"]]


def test_every_line_of_algorithms_1_and_2_has_its_row():
    covered: dict[int, set[int]] = {1: set(), 2: set()}
    for row in table_rows(PAGE.read_text(encoding="utf-8")):
        for algorithm, lines in cited_lines(row[0]).items():
            covered[algorithm] |= lines
    for algorithm, lines in ALGORITHM_LINES.items():
        assert lines <= covered[algorithm], f"Algorithm {algorithm} lines without a row: {sorted(lines - covered[algorithm])}"


def test_every_named_option_is_a_flag_of_cader_eval():
    flags = {f.name for f in fields(CaderConfig)} | {f.name for f in fields(RunOptions)}
    rows = table_rows(PAGE.read_text(encoding="utf-8"))
    assert len(rows) >= 20 and all(len(row) == 5 for row in rows), "every row: paper, says, where, differs, option"
    named = [option for row in rows for option in named_options(row[4])]
    assert {"frame_rule", "trade_rgr_frames_for_speed", "crop_edge", "p_yes_mode", "temperature", "tau"} <= set(named)
    assert not [option for option in named if option not in flags]


def test_every_departure_of_the_paper_values_module_has_its_row():
    text = PAGE.read_text(encoding="utf-8")
    table = "\n".join(" | ".join(row) for row in table_rows(text))
    assert not [name for name in DEPARTURES if name not in table]
