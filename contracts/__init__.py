"""The file contracts between the stages (predictions, calibration, judgments) as pydantic models, and the one
JSONL reader/appender and atomic writer every stage uses."""
