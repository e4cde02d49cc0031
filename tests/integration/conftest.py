"""Fixtures of the modules that call the service as signed-in employees: the key their JWTs
are signed with, the JWKS file the service verifies them by, and the app configured with it
over the samples' index."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from litestar.testing import AsyncTestClient

from tests.integration.test_service import make_client


@pytest.fixture(scope="module")
def signing_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def jwks(tmp_path_factory: pytest.TempPathFactory, signing_key) -> Path:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(signing_key.public_key()))
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps({"keys": [{**public, "kid": "k1", "use": "sig"}]}))
    return path


@pytest.fixture
async def client(sample_index_url, jwks) -> AsyncIterator[AsyncTestClient]:
    async with make_client(sample_index_url, jwks) as c:
        yield c
