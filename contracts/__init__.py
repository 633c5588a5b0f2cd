"""The file contracts between the stages and the one way to read and append their files.

- `records`: pydantic models of a predictions.jsonl record (`PredictionRecord`, with `Stage1Record` and
  `Stage2Record`), the calibration file (`CalibrationFile`) and a judgments.jsonl record (`JudgmentRecord`);
  docs/contracts.md is generated from them.
- `jsonl`: the JSON Lines reader, validating reader and appender every stage uses.

Atomic whole-file writes are `cader.vlm.files.write_atomic` and `write_json_atomic`.
"""
