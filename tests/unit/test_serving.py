"""How `kb serve` decides where it may run the development sign-in, which proxies it
believes about the client's address, and how a downloaded original is named."""

from __future__ import annotations

import socket

import pytest

from kb_cli.serve import _loopback
from kb_core.settings import Settings
from query_service.controllers.documents import _attachment


def test_a_name_is_loopback_only_when_every_address_it_resolves_to_is(monkeypatch):
    resolved = {"localhost": ["127.0.0.1", "::1"], "mapped": ["127.0.0.1", "192.0.2.10"]}
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port: [
        (None, None, None, "", (address, 0)) for address in resolved[host]])
    assert _loopback("localhost")
    assert not _loopback("mapped")  # e.g. /etc/hosts mapping localhost elsewhere too


def test_trusted_proxies_are_addresses_or_networks():
    service = Settings.from_env({"KB_TRUSTED_PROXIES": "10.1.0.0/16, 192.0.2.7"}).service
    assert service.trusted_proxies == ("10.1.0.0/16", "192.0.2.7")
    assert Settings.from_env({}).service.trusted_proxies == ("127.0.0.1", "::1")
    with pytest.raises(ValueError, match="KB_TRUSTED_PROXIES"):
        Settings.from_env({"KB_TRUSTED_PROXIES": "proxy.internal"})


def test_a_download_names_its_file_without_breaking_the_header():
    header = _attachment('a"b\\c\r\nd\x7f.txt')
    fallback = header.split('filename="')[1].split('"')[0]
    assert fallback == "a_b_c__d_.txt" and "\r" not in header and "\n" not in header
    assert header.endswith("filename*=UTF-8''a%22b%5Cc%0D%0Ad%7F.txt")
    assert "filename*=UTF-8''%E6%A1%88%E5%86%85.html" in _attachment("案内.html")
