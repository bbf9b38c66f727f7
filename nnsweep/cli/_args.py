"""The parsers and option types every command shares: one-line usage errors, the global options,
bounded numbers, and the checks argparse runs on a value before any command's code."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

from nnsweep.cli._output import EXIT_USAGE
from nnsweep.core.errors import SpecError


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        message = " ".join(message.split())
        if len(message) > 300:
            message = message[:297] + "..."
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _int_in(low: int, high: int) -> Any:
    """An argparse type: an integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text[:40]} is out of range: give {low} to {high:,}")
        return value

    parse.__name__ = "integer"
    return parse


def one_of_setting(cls: type, name: str) -> Any:
    """An argparse type for one value of the integer list setting ``cls.name`` (a ``space`` key
    an option sets to one value): within its bounds, or one of its choices."""
    from nnsweep.core.fields import setting_of

    meta, _ = setting_of(cls, name)
    if meta.choices is not None:
        choices = meta.choices

        def parse(text: str) -> int:
            value = _int_in(min(choices), max(choices))(text)
            if value not in choices:
                raise argparse.ArgumentTypeError(f"{value} is not one of {', '.join(map(str, choices))}")
            return int(value)

        parse.__name__ = "integer"
        return parse
    low = meta.ge if meta.ge is not None else meta.gt
    high = meta.le if meta.le is not None else meta.lt
    if low is None or high is None:
        raise TypeError(f"{cls.__name__}.{name}: an option's number needs a lower and an upper bound")
    return _int_in(int(low), int(high))


def _seconds(low: float, high: float, *, open_low: bool = False) -> Any:
    """An argparse type: a finite number of seconds in [low, high] (or (low, high])."""
    import math

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
        if not math.isfinite(value) or value < low or value > high or (open_low and value == low):
            lower = f"more than {low:g}" if open_low else f"{low:g}"
            raise argparse.ArgumentTypeError(f"{text[:40]} is out of range: give {lower} to {high:g} seconds")
        return value

    parse.__name__ = "number"
    return parse


def _fraction(low: float, high: float, example: float) -> Any:
    """An argparse type: a fraction strictly between low and high (0.01 is 1 %)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
        if not low < value < high:  # NaN fails too
            raise argparse.ArgumentTypeError(
                f"{text[:40]} is out of range: give a fraction between {low:g} and {high:g}, e.g. {example:g}"
            )
        return value

    parse.__name__ = "number"
    return parse


def setting_option(parser: argparse.ArgumentParser, cls: type, name: str, flag: str, *, context: str = "") -> None:
    """The option ``flag`` for the setting ``cls.name`` (:func:`nnsweep.core.fields.setting`),
    stored as ``name``: its type, bounds, default and help are the setting's own, ``context``
    said before the help."""
    from nnsweep.core.fields import number_text, settings_of, value_type

    [(annotation, meta, default)] = [(a, m, d) for n, a, m, d in settings_of(cls) if n == name]
    kind, _ = value_type(annotation)
    text = (f"{context}: " if context else "") + meta.help.replace("%", "%%")
    if kind is bool:
        assert default is False, f"{cls.__name__}.{name}: a flag sets a setting that is off by default"
        parser.add_argument(flag, dest=name, action="store_true", help=text)
        return
    low = meta.ge if meta.ge is not None else meta.gt
    high = meta.le if meta.le is not None else meta.lt
    if low is None or high is None:
        raise TypeError(f"{cls.__name__}.{name}: an option's number needs a lower and an upper bound")
    if kind is int:
        parse = _int_in(int(low) + (meta.gt is not None), int(high) - (meta.lt is not None))
    elif meta.unit == "fraction":  # strictly between its bounds
        parse = _fraction(low, high, default)
    else:  # seconds, up to and including the upper bound
        parse = _seconds(low, high, open_low=meta.gt is not None)
    parser.add_argument(flag, dest=name, type=parse, default=default, help=f"{text} (default {number_text(default)})")


def _http_url(text: str) -> str:
    from nnsweep.report.html import check_ui_url

    try:
        return check_ui_url(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _positive_shape(text: str) -> tuple[int, ...]:
    from nnsweep.models import check_input_shape

    try:
        shape = tuple(int(part, 10) for part in text.split(",", 8))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a comma list of integers (e.g. 1,3,224,224)") from None
    try:
        return check_input_shape(shape, "--input-shape")
    except SpecError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """-v and --cache-dir, on the top parser and (defaults suppressed) on every subcommand."""
    default: Any = argparse.SUPPRESS
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0 if top else default,
        help="more log output (-vv for debug); tracebacks of unexpected errors",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None if top else default,
        help="artifact and model cache (default: $NNSWEEP_CACHE or ~/.cache/nnsweep)",
    )


class _SubParser(_Parser):
    """A subcommand's parser: it takes the global options too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _global_options(self, top=False)


def _readable_token_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-readable-token",
        action="store_true",
        help="accept a token file that group or others can read (not recommended)",
    )
