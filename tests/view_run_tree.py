"""The quickstart-shaped run tree of the viewer's browser tests: `cader.dev.viewer_records.write_run_tree` (real
runner, report, calibration and judge aggregate on scripted replies), under the tests' name for it."""

from cader.dev.viewer_records import judgment_row
from cader.dev.viewer_records import write_run_tree as build_run_tree

__all__ = ["build_run_tree", "judgment_row"]
