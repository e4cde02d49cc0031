"""Who asks: a caller verified by a door (an API token, an employee's JWT or page session, the
shell's user, the development sign-in of `kb serve --dev-user`)."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["Caller", "reviewer_groups"]


class Caller(msgspec.Struct, frozen=True):
    """A verified caller: an app (its token's name), an employee (the JWT's or ID token's
    `sub`), the user running `kb ask`, or the development sign-in's user. Its groups decide
    what it may read."""

    kind: Literal["token", "jwt", "cli", "dev"]
    subject: str
    groups: tuple[str, ...]


def reviewer_groups(reviewer: Caller | None) -> list[str] | None:
    """The groups a reviewer reads through; None for the operator at the shell (`reviewer`
    None), who reads everything."""
    return None if reviewer is None else list(reviewer.groups)
