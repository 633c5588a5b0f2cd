"""The building blocks of the contract models: the base class and the value types records share."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainValidator


class Record(BaseModel):
    """Base of every contract model: unknown keys are kept, values must already have their JSON type (strict:
    no "3" for 3, no 1 for true)."""

    model_config = ConfigDict(extra="allow", strict=True)


def _json_number(value: Any) -> int | float:
    # A bool is an int to Python but not a number in a record. An int stays an int, so a record written back
    # through its model keeps the bytes it was read with (10 stays 10, not 10.0).
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {type(value).__name__}")  # noqa: TRY004 (pydantic reports ValueError)
    return value


def _int_or_str(value: Any) -> int | str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected an integer or a string, got {type(value).__name__}")  # noqa: TRY004
    return value


Number = Annotated[int | float, PlainValidator(_json_number)]
"""A JSON number, kept as written."""

Id = Annotated[int | str, PlainValidator(_int_or_str)]
"""An id a release gives as an integer or a string, kept as written."""

Window = Annotated[list[Number], Field(min_length=2, max_length=2)]
"""[start, end] in seconds."""
