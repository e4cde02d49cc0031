"""`kb token create|list|revoke`: API tokens for apps. A new token is printed once, on stdout;
only its hash is stored."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import msgspec

from kb_core.settings import Settings

__all__ = ["add_token_parser", "cmd_token"]


def _groups(value: str) -> tuple[str, ...]:
    groups = tuple(g.strip() for g in value.split(",") if g.strip())
    if not groups:
        raise argparse.ArgumentTypeError("give at least one group, e.g. --groups hr,managers")
    return groups


def add_token_parser(sub: argparse._SubParsersAction,
                     func: Callable[[argparse.Namespace, Settings], int]) -> None:
    """Add `token create|list|revoke` to the `kb` subcommands, dispatched to `func`."""
    token = sub.add_parser("token", help="API tokens for apps")
    actions = token.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="make a token (printed once) for an app")
    create.add_argument("name")
    create.add_argument("--groups", type=_groups, required=True,
                        help="the groups whose documents the app may read")
    listing = actions.add_parser("list", help="list tokens (never the tokens themselves)")
    revoke = actions.add_parser("revoke", help="revoke the live token of that name")
    revoke.add_argument("name")
    for parser in (create, listing, revoke):
        parser.add_argument("--json", action="store_true")
    token.set_defaults(func=func)


def _print_json(payload: object) -> None:
    sys.stdout.write(msgspec.json.encode(payload).decode() + "\n")


def cmd_token(args: argparse.Namespace, settings: Settings, url: str) -> int:
    """Run `kb token ACTION` against the migrated database at `url`; return the exit status."""
    from kb_core.database import connect
    from kb_core.tokens import TokenNameTakenError, TokenStore

    with connect(url) as conn:
        if args.action == "create":
            try:
                token = TokenStore.create(conn, args.name, args.groups)
            except TokenNameTakenError as exc:
                print(f"{exc}: revoke it first or choose another name", file=sys.stderr)
                return 1
            return _created(args, token)
        if args.action == "list":
            return _listed(args, TokenStore.list(conn))
        revoked = TokenStore.revoke(conn, args.name)
    if args.json:
        _print_json({"revoked": revoked})
    print(f"revoked {args.name}" if revoked else f"no live token named {args.name!r}",
          file=sys.stderr)
    return 0 if revoked else 1


def _created(args: argparse.Namespace, token: str) -> int:
    groups = list(dict.fromkeys(args.groups))
    if args.json:
        _print_json({"name": args.name.strip(), "token": token, "groups": groups})
    else:
        print(token)
        print(f"token for {args.name} (groups: {','.join(groups)}); it is shown only this once",
              file=sys.stderr)
    return 0


def _listed(args: argparse.Namespace, tokens: list[dict]) -> int:
    if args.json:
        _print_json({"tokens": tokens})
        return 0
    for t in tokens:
        used = f"{t['last_used_at']:%Y-%m-%d %H:%M}" if t["last_used_at"] else "never used"
        state = "revoked" if t["revoked"] else "live"
        print(f"{t['name']}\t{t['prefix']}…\t{','.join(t['groups'])}\t"
              f"{t['created_at']:%Y-%m-%d %H:%M}\t{used}\t{state}")
    return 0
