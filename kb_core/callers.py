"""Who asks: a caller verified by a door (an API token, an employee's JWT, the shell's user)."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["Caller"]


class Caller(msgspec.Struct, frozen=True):
    """A verified caller: an app (its token's name), an employee (the JWT's `sub`) or the
    user running `kb ask`. Its groups decide what it may read."""

    kind: Literal["token", "jwt", "cli"]
    subject: str
    groups: tuple[str, ...]
