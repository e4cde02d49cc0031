"""`kb token create|list|revoke`: API tokens for apps. A new token is printed once, on stdout;
only its hash is stored."""

from __future__ import annotations

import argparse
import sys

import msgspec

from kb_core.api_tokens import TokenNameTakenError, create_token, list_tokens, revoke_token
from kb_core.migrations import prepare_database
from kb_core.settings import Settings

__all__ = ["run"]


def _print_json(payload: object) -> None:
    sys.stdout.write(msgspec.json.encode(payload).decode() + "\n")


def run(args: argparse.Namespace, settings: Settings) -> int:
    url = prepare_database(settings).database_url
    if args.action == "create":
        try:
            token = create_token(url, args.name, args.groups)
        except TokenNameTakenError as exc:
            print(f"{exc}: revoke it first or choose another name", file=sys.stderr)
            return 1
        return _created(args, token)
    if args.action == "list":
        return _listed(args, list_tokens(url))
    revoked = revoke_token(url, args.name)
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
