"""The torch_npu release the shim stands in for, and the CANN and SoC answers that go with it.

Real torch_npu reports its own version (``torch_npu.__version__``), the CANN installed beside it
(``torch_npu.utils.get_cann_version``, ``torch_npu.npu.utils._is_gte_cann_version``) and the SoC it runs on
(``torch_npu.npu.utils.get_soc_version``); test suites gate on all three. The facts live in ``release.toml``
with their sources; this module reads them once and orders CANN version strings as torch_npu does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from ..errors import OpArgumentError
from ..files.toml import read_toml, typed_value

RELEASE_FILE = Path(__file__).with_name("release.toml")
# CANN's version strings as torch_npu parses them (csrc/core/npu/GetCANNInfo.cpp, VersionToNum): a release
# "9.1.0", a release candidate "8.3.RC1", a test build "8.5.T2", each optionally followed by ".alphaN".
_CANN_VERSION = re.compile(r"(\d+)\.(\d+)\.(?:(\d+)|RC(\d+)|T(\d+))(?:\.alpha(\d+))?", re.IGNORECASE)
CANN_VERSION_FORMS = "X.Y.Z, X.Y.RCn or X.Y.Tn, optionally with .alphaN (e.g. 9.0.0, 8.3.RC1)"


@dataclass(frozen=True)
class Release:
    """torch_npu's version, the CANN version and the packages that report it, and the SoC numbers."""

    torch_npu: str
    cann: str
    cann_modules: tuple[str, ...]
    soc_versions: Mapping[str, int]


@lru_cache(maxsize=1)
def release() -> Release:
    """The bundled release.toml, read once: a pure function of the package's file, so not session state."""
    data = read_toml(RELEASE_FILE)
    where = RELEASE_FILE.name
    socs = typed_value(data, "soc_version", dict, where)
    return Release(
        torch_npu=typed_value(data, "torch_npu", str, where),
        cann=typed_value(data, "cann", str, where),
        cann_modules=tuple(typed_value(data, "cann_modules", list, where)),
        soc_versions=MappingProxyType({name: typed_value(socs, name, int, f"{where} [soc_version]") for name in socs}),
    )


def cann_version_key(version: str) -> tuple[int, ...]:
    """A sort key ordering CANN versions as torch_npu compares them: within one major.minor, test builds
    (T) before release candidates (RC) before releases; an alpha comes before its release but after the
    release candidate it is cut from."""
    match = _CANN_VERSION.fullmatch(str(version).strip())
    if match is None:
        raise OpArgumentError(
            f"CANN version {version!r} is not a version torch_npu reads; write {CANN_VERSION_FORMS}.",
            argument="version",
        )
    major, minor, patch, rc, test, alpha = match.groups()
    alpha_rank = -1 if alpha is None else int(alpha)
    if patch is not None:
        return (int(major), int(minor), int(patch) + 1, 0 if alpha is not None else 1, max(alpha_rank, 0))
    if rc is not None:
        return (int(major), int(minor), 0, 1, int(rc), alpha_rank)
    return (int(major), int(minor), 0, 0, int(test), alpha_rank)


def _check_module(module: str) -> None:
    modules = release().cann_modules
    if module not in modules:
        raise OpArgumentError(
            f"get_cann_version(module={module!r}): the model reports the CANN packages {', '.join(modules)} "
            "(the driver's version is not modeled).", op="get_cann_version", argument="module"
        )


def get_cann_version(module: str = "CANN") -> str:
    """The modeled CANN version, which every CANN package reports."""
    _check_module(module)
    return release().cann


def is_gte_cann_version(version: str, module: str = "CANN") -> bool:
    """Whether the modeled CANN is ``version`` or newer (what ``@SkipIfNotGteCANNVersion`` asks)."""
    _check_module(module)
    return cann_version_key(release().cann) >= cann_version_key(version)


def soc_version(soc: str) -> int:
    """torch_npu's SocVersion number of the SoC named ``soc`` (a target's CANN platform name)."""
    number = release().soc_versions.get(soc)
    if number is None:
        raise OpArgumentError(f"SoC {soc!r} has no torch_npu SocVersion number in {RELEASE_FILE.name}; add it there.")
    return number
