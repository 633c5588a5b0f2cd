"""Help texts of command-line flags, read from the docstring of the function or dataclass the flags come from."""

from __future__ import annotations

import docstring_parser


def argument_help(obj) -> dict[str, str]:
    """{name: one-line description} of the parameters (`Args:`) or fields (`Attributes:`) in `obj`'s docstring."""
    params = docstring_parser.parse(obj.__doc__ or "").params
    return {param.arg_name: " ".join(param.description.split()) for param in params if param.description}
