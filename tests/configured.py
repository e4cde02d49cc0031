"""The engine's parts configured as a command configures them: from the environment (which a
test points at its fake servers), with the provider chosen by name."""

from __future__ import annotations

import dataclasses

from kb_core.settings import AnswererSettings, EmbedderSettings, RerankerSettings, Settings


def answerer(llm: str) -> AnswererSettings:
    return dataclasses.replace(Settings.from_env().answerer, llm=llm)


def reranker(name: str) -> RerankerSettings:
    return dataclasses.replace(Settings.from_env().reranker, name=name)


def embedder(name: str) -> EmbedderSettings:
    return dataclasses.replace(Settings.from_env().embedder, name=name)
