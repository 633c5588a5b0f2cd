"""The one way a cader command line is built (train/sft.py's LightningCLI aside): from the function it runs.

A stage's flags are the parameters of the function that does its work (`calibrate_predictions`, `write_viewer`,
`export_lmms`, ...), each flag's type, default and choices from the signature and its help from the docstring's
entry for it (`cader.cli.docstrings.argument_help`), as `jsonargparse.CLI` builds them. Two shapes the documented
commands take are beyond a signature, so they are named here instead of hand-adding the flag:

- `positional`: parameters given without a flag (`cader view RUN`, `cader export-lmms RUN`);
- `several`: list parameters that take several values after one flag or as the trailing words
  (`--predictions A.jsonl B.jsonl`, `cader compare A B`), where jsonargparse's list flags want `[A,B]`;
- `optional`: required parameters a subcommand of the same command does without (`cader judge`'s inputs, which
  `cader judge compare` does not take): optional flags, which the caller checks before calling;
- `groups`: parameters whose type is a dataclass of settings (`calibrate_predictions`'s `rule: Rule | None`), each
  field a flag of its own name (`--alpha`, not `--rule.alpha`: flags and YAML keys stay flat), under a heading of its
  own in --help; `grouped_arguments` builds the objects from the parsed flags. (Any other dataclass parameter is
  jsonargparse's nested group: `--vllm_main.max_model_len`.)

Every parser also takes `--config FILE` (a YAML of the same names) and `--print_config`.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Sequence

from cader.cli.docstrings import argument_help
from jsonargparse import ActionConfigFile, ArgumentParser


def summary(function: Callable) -> str:
    """The first paragraph of `function`'s docstring, on one line: the parser's description."""
    return " ".join((inspect.getdoc(function) or "").split("\n\n")[0].split())


def _without_none(hint):
    """`X` of `X | None` (the values a flag takes), else the hint itself."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else hint
    return hint


def function_parser(function: Callable, prog: str | None = None, positional: Iterable[str] = (),
                    several: Iterable[str] = (), optional: Iterable[str] = (), skip: Iterable[str] = (),
                    groups: Iterable[str] = (), **parser_kwargs) -> ArgumentParser:
    """A parser whose arguments are `function`'s parameters.

    function: the function the command runs.
    prog: the program name the usage shows.
    positional: parameters given without a flag, in this order (a list-typed one takes the remaining words).
    several: list-typed parameters that take one or more values after their flag.
    optional: required parameters given as optional flags (default None), for the caller to check.
    skip: parameters the command line does not set (the caller passes them).
    groups: dataclass parameters whose fields are flags of their own (`grouped_arguments` rebuilds them).
    parser_kwargs: more ArgumentParser arguments (epilog, formatter_class, description).
    """
    positional, several, optional, skip = tuple(positional), tuple(several), tuple(optional), set(skip)
    parser = ArgumentParser(prog=prog, **{"description": summary(function), **parser_kwargs})
    parser.add_argument("--config", action=ActionConfigFile, help="a YAML file of these arguments")
    helps = argument_help(function)
    parameters = inspect.signature(function).parameters
    hints = typing.get_type_hints(function)
    for name in (*positional, *several, *optional):
        if name not in parameters:
            raise TypeError(f"{function.__qualname__} has no parameter {name!r}")
    for name in optional:
        parser.add_argument(f"--{name}", type=hints.get(name, str) | None, default=None,
                            help=f"{helps.get(name)} (required, unless a subcommand runs)")
    for name in (*positional, *several):
        default = parameters[name].default
        missing = default is inspect.Parameter.empty
        hint = _without_none(hints.get(name, str))
        listed = name in several or typing.get_origin(hint) in (list, tuple, Sequence)
        item = typing.get_args(hint)[0] if listed and typing.get_args(hint) else hint
        kwargs = {"type": item, "help": helps.get(name)}
        if listed:
            kwargs["nargs"] = "+" if missing else "*"
        if name in several:
            kept = {} if missing else {"default": list(default) if isinstance(default, (list, tuple)) else default}
            parser.add_argument(f"--{name}", required=missing, **kwargs, **kept)
        else:
            parser.add_argument(name, **kwargs)
    groups = group_types(function, groups)
    taken = {*positional, *several, *optional, *skip, *groups}
    parser.add_function_arguments(function, skip=taken)
    for group in groups.values():
        parser.add_class_arguments(group)
    # a list parameter defaults to a tuple (an immutable default); the flag's value is a list either way
    parser.set_defaults({name: list(p.default) for name, p in parameters.items()
                         if isinstance(p.default, tuple) and name not in taken})
    return parser


def extend_help(parser: ArgumentParser, dest: str, text: str) -> None:
    """Add `text` to the help of argument `dest`: what a docstring cannot say, as a registry's current names."""
    action = next(a for a in parser._actions if a.dest == dest)
    action.help = f"{action.help}; {text}" if action.help else text


def group_types(function: Callable, groups: Iterable[str]) -> dict[str, type]:
    """{name: dataclass} of the `groups` among `function`'s parameters."""
    hints = typing.get_type_hints(function)
    types_ = {name: _without_none(hints.get(name)) for name in groups}
    for name, hint in types_.items():
        if not dataclasses.is_dataclass(hint):
            raise TypeError(f"{function.__qualname__}'s {name!r} is not a dataclass parameter")
    return types_


def grouped_arguments(function: Callable, arguments: dict, groups: Iterable[str]) -> dict:
    """The flat `arguments` of `function_parser(function, groups=groups)` as `function`'s keyword arguments: each
    group built from its fields' values."""
    arguments = dict(arguments)
    for name, group in group_types(function, groups).items():
        arguments[name] = group(**{field.name: arguments.pop(field.name) for field in dataclasses.fields(group)
                                   if field.name in arguments})
    return arguments


def call_arguments(parser: ArgumentParser, argv: list[str] | None) -> dict:
    """`argv` parsed by `parser` (a `function_parser`) as the function's keyword arguments."""
    arguments = parser.parse_args(argv).as_dict()
    arguments.pop("config", None)
    return arguments
