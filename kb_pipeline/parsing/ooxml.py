"""Checks on the ZIP package of an Office Open XML file before a library opens it."""

from __future__ import annotations

import io
import zipfile
import zlib

from kb_pipeline.parsing.model import ParseError

__all__ = ["check_package"]

# lxml would inflate a zip bomb's XML into memory; real documents' XML stays far below this.
_MAX_XML_BYTES = 512 * 1024 * 1024
# Office 97-2003 files, and OOXML files that Office encrypted with a password, are OLE2.
_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def check_package(data: bytes, kind: str, main_content_type: str) -> None:
    """Raise ParseError unless `data` is a ZIP holding a `kind` main part of sane size.

    `main_content_type` is a fragment of the main part's content type, such as
    "wordprocessingml.document.main", as [Content_Types].xml declares it.
    """
    if data.startswith(_OLE2_MAGIC):
        raise ParseError(
            f"not a valid {kind} file: it is an OLE2 compound file, i.e. a legacy Office "
            "97-2003 document or a password-protected Office file"
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            names = set(package.namelist())
            if "[Content_Types].xml" not in names:
                raise ParseError(
                    f"not a valid {kind} file: ZIP archive has no [Content_Types].xml "
                    "(not an Office document)"
                )
            content_types = package.read("[Content_Types].xml").decode("utf-8", "replace")
            xml_bytes = sum(
                info.file_size for info in package.infolist() if info.filename.endswith(".xml")
            )
            if xml_bytes <= _MAX_XML_BYTES:
                # Reading every member once turns a damaged part into one clear message
                # here, rather than a decompression error deep inside the library.
                damaged = package.testzip()
                if damaged is not None:
                    raise ParseError(
                        f"not a valid {kind} (ZIP) file: member '{damaged}' is damaged"
                    )
    except zipfile.BadZipFile as exc:
        raise ParseError(f"not a valid {kind} (ZIP) file: {exc}") from exc
    except zlib.error as exc:
        raise ParseError(f"not a valid {kind} (ZIP) file: damaged compressed data ({exc})") from exc
    except (OSError, RuntimeError, ValueError, EOFError, NotImplementedError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
        raise ParseError(
            f"not a valid {kind} (ZIP) file: archive is truncated or damaged ({problem})"
        ) from exc
    if main_content_type not in content_types:
        raise ParseError(
            f"not a valid {kind} file: the package has no {kind} main part "
            "(another Office format under this extension?)"
        )
    if xml_bytes > _MAX_XML_BYTES:
        raise ParseError(
            f"{kind} XML expands to {xml_bytes // 2**20} MiB; the limit is "
            f"{_MAX_XML_BYTES // 2**20} MiB"
        )
