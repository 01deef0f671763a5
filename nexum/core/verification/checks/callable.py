"""``callable``: a Python function a library user registered under a name, returning True or False."""

from __future__ import annotations

import re
from dataclasses import dataclass

from nexum.core.errors import ValidationFailed
from nexum.core.verification.checks.base import (
    DENIED_EXECUTABLE,
    MAX_NAME_CHARS,
    PASSED,
    RAISED,
    RETURNED_FALSE,
    CheckContext,
    CheckSpec,
    member,
    require_str,
)
from nexum.core.verification.checks.registry import check_kind

DOTTED_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?::[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)?", re.ASCII)


@check_kind("callable")
@dataclass(frozen=True)
class CallableCheck(CheckSpec):
    """A Python callable registered by a library user, named ``package.module:function`` (or dotted).

    The dotted path is only a stable name: the runner looks it up in a registry the operator built; it never
    imports whatever a contract names (SPEC V8). A registered function takes no arguments and returns True
    (pass) or False (``returned_false``); anything else, or raising, is ``raised``.
    """

    dotted_path: str = member(
        type="string",
        pattern=f"^{DOTTED_PATH.pattern}$",
        maxLength=MAX_NAME_CHARS,
        description="a registered callable's name",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        path = require_str(self.dotted_path, "dotted_path", max_chars=MAX_NAME_CHARS)
        if not DOTTED_PATH.fullmatch(path):
            raise ValidationFailed(
                "dotted_path must look like 'package.module:function' or 'package.module.function'",
                field="dotted_path",
            )

    def evaluate(self, context: CheckContext) -> tuple[str, str]:
        function = context.registered_callable(self.dotted_path)
        if function is None:
            return DENIED_EXECUTABLE, f"callable {self.dotted_path!r} is not registered"
        verdict = function()
        if verdict is True:
            return PASSED, f"{self.dotted_path} returned True"
        if verdict is False:
            return RETURNED_FALSE, f"{self.dotted_path} returned False"
        return RAISED, f"{self.dotted_path} returned {type(verdict).__name__}, expected True or False"
