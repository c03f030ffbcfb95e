"""SuperKernel options strings: ``"opt1=v1:opt2=v2"``, list values ``a,b``.

CANN parses these at graph compile time; we validate them eagerly so a typo fails the test that made
it, naming the scope, the option and the allowed values, instead of being ignored.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from .errors import OptionsError

_OP_TYPE_LIST = "a comma list of op types, e.g. GroupedMatmul,MoeGatingTopK"
# option -> allowed values (None: free-form, checked by its own rule), and the default.
OPTIONS: Mapping[str, tuple[tuple[str, ...] | None, str]] = MappingProxyType(
    {
        "feed-sync-all": (("0", "1"), "0"),
        "stream-fusion": (("0", "1"), "0"),
        "strict-scope-check": (("bypass", "abort"), ""),
        "dcci-before-kernel-start": (None, ""),
        "dcci-after-kernel-end": (None, ""),
        "dcci-disable-on-kernel": (None, ""),
        "debug-aic-num": (None, ""),
        "debug-aiv-num": (None, ""),
    }
)


@dataclass(frozen=True)
class SuperKernelOptions:
    """Parsed options of one scope; ``values`` holds only what the user set."""

    scope: str
    text: str
    values: Mapping[str, str]

    def get(self, option: str) -> str:
        return self.values.get(option, OPTIONS[option][1])


def _check_value(scope: str, option: str, value: str) -> None:
    allowed, _ = OPTIONS[option]
    if allowed is not None and value not in allowed:
        raise OptionsError(
            f"super_kernel scope '{scope}': option {option}={value!r} is not allowed; use one of {', '.join(allowed)}."
        )
    if option.startswith("dcci-") and not all(item.strip() for item in value.split(",")):
        raise OptionsError(f"super_kernel scope '{scope}': option {option}={value!r} must be {_OP_TYPE_LIST}.")
    if option.startswith("debug-") and not value.isdigit():
        raise OptionsError(
            f"super_kernel scope '{scope}': option {option}={value!r} must be a non-negative core count."
        )


def parse_options(scope: str, text: str) -> SuperKernelOptions:
    """Parse and validate ``text``; an unknown option gets the nearest known name as a suggestion."""
    values: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(":"))):
        option, sep, value = item.partition("=")
        option, value = option.strip(), value.strip()
        if not sep or not option or not value:
            raise OptionsError(
                f"super_kernel scope '{scope}': malformed option {item!r} in {text!r}; "
                "write options as 'name=value' separated by ':', e.g. 'stream-fusion=1:feed-sync-all=1'."
            )
        if option not in OPTIONS:
            near = difflib.get_close_matches(option, list(OPTIONS), n=1)
            hint = f" Did you mean '{near[0]}'?" if near else ""
            raise OptionsError(
                f"super_kernel scope '{scope}': unknown option '{option}'.{hint} "
                f"Known options: {', '.join(OPTIONS)}."
            )
        if option in values:
            raise OptionsError(f"super_kernel scope '{scope}': option '{option}' is given twice in {text!r}.")
        _check_value(scope, option, value)
        values[option] = value
    return SuperKernelOptions(scope, text, MappingProxyType(values))
