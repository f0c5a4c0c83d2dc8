"""Logs where they live: ``s3://``, ``gs://``, ``az://`` (``abfs://``) and ``https://`` inputs.

Remote inputs go through fsspec and the filesystem package of each store (s3fs, gcsfs, adlfs;
aiohttp for https), installed by the extras ``prefixplan[s3]``, ``[gcs]``, ``[azure]`` and
``[http]``. Credentials come only from each cloud's usual environment and config files (for S3:
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ``AWS_ENDPOINT_URL_S3`` or
``AWS_ENDPOINT_URL`` for S3-compatible servers, instance roles); prefixplan never takes them
as options and never prints them: messages name inputs by :func:`shown` (no user:password, no
query string of an https URL, which may hold a signature) and :func:`scrub` removes the values
of the credential variables from any text a storage library returns.

Globs and prefixes ("folders") expand like local ones, in sorted order. Files are opened as
seekable streams read in blocks (:data:`BLOCK_BYTES`), never downloaded whole. Nothing here
imports fsspec before a remote input is met, so local inputs cost no import.
"""

from __future__ import annotations

import glob
import io
import os
import re
from typing import Any

from prefixplan.errors import InputError, UsageError

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
SCHEMES: dict[str, str] = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "http": "http",
    "https": "http",
}
"""URL scheme -> the extra that installs its filesystem."""
_PACKAGES = {"s3": "s3fs", "gcs": "gcsfs", "azure": "adlfs", "http": "aiohttp"}
_ENV_HINT = {
    "s3": "credentials come from the AWS environment (AWS_ACCESS_KEY_ID, AWS_PROFILE, ~/.aws, an instance role); "
    "AWS_ENDPOINT_URL_S3 points at an S3-compatible server",
    "gcs": "credentials come from GOOGLE_APPLICATION_CREDENTIALS or gcloud's application-default login",
    "azure": "credentials come from AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN, "
    "AZURE_STORAGE_CONNECTION_STRING or an Azure identity",
    "http": "check the URL",
}
CREDENTIAL_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_API_KEY",
)
"""Environment variables whose values never appear in a message (:func:`scrub`)."""
BLOCK_BYTES = 8 * 2**20
"""Bytes fetched per request when a remote file is read line by line."""


def scheme_of(path: str) -> str | None:
    """The URL scheme of ``path`` (lower case), or None for a local path."""
    m = _URL.match(path)
    return m.group(1).lower() if m else None


def is_url(path: str) -> bool:
    """True when ``path`` is a URL (``scheme://...``), not a local file name."""
    return "://" in path and _URL.match(path) is not None


def shown(path: str) -> str:
    """``path`` as messages and records name it: a URL without user:password, and an http(s)
    URL without its query string (signed URLs carry their signature there)."""
    scheme = scheme_of(path)
    if scheme is None:
        return path
    rest = path[len(scheme) + 3 :]
    host, sep, tail = rest.partition("/")
    if "@" in host:
        host = host.rsplit("@", 1)[1]
    out = f"{scheme}://{host}{sep}{tail}"
    if scheme in ("http", "https") and "?" in out:
        out = out.split("?", 1)[0] + "?..."
    return out


def scrub(text: str) -> str:
    """``text`` with the value of every credential variable (:data:`CREDENTIAL_ENV`) replaced by ``***``."""
    for name in CREDENTIAL_ENV:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def _clean(text: str, url: str) -> str:
    """``text`` (an error a storage library wrote about ``url``) without credentials: no
    credential variable's value (:func:`scrub`), and ``url`` only as :func:`shown` names it."""
    text = scrub(text).replace(url, shown(url))
    query = url.split("?", 1)[1] if "?" in url else ""
    if query:
        text = text.replace(query, "...")
        # a library may print the URL re-encoded (aiohttp writes %2F as /): drop every query of
        # any http(s) URL in the message, whatever its spelling (signatures live there)
        text = _ANY_QUERY.sub(r"\1?...", text)
    return text


_ANY_QUERY = re.compile(r"(https?://[^\s'\"?]+)\?[^\s'\")]+")


def _extra(scheme: str) -> str:
    extra = SCHEMES.get(scheme)
    if extra is None:
        known = ", ".join(f"{s}://" for s in ("s3", "gs", "az", "abfs", "https"))
        raise UsageError(f"cannot read {scheme}:// inputs", hint=f"prefixplan reads local paths and {known}")
    return extra


def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) for ``url``.

    Raises:
        UsageError: the scheme is not supported, or its extra is not installed (the hint names it).
    """
    scheme = scheme_of(url) or ""
    extra = _extra(scheme)
    hint = f'pip install "prefixplan[{extra}]"'
    try:
        import fsspec
    except ImportError:
        raise UsageError(
            f"reading {scheme}:// inputs needs fsspec and {_PACKAGES[extra]}, which are not installed", hint=hint
        ) from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError:
        raise UsageError(
            f"reading {scheme}:// inputs needs {_PACKAGES[extra]}, which is not installed", hint=hint
        ) from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"cannot read {shown(url)}: {_clean(str(exc), url)}", hint=_ENV_HINT[extra]) from None


def _failed(url: str, exc: BaseException) -> InputError:
    """The error for a storage call that failed on ``url`` (credentials scrubbed)."""
    extra = SCHEMES.get(scheme_of(url) or "", "http")
    name = shown(url)
    if isinstance(exc, FileNotFoundError):
        return InputError(
            f"log file not found: {name}", hint="check the URL; a prefix or a glob reads every file under it"
        )
    if isinstance(exc, PermissionError):
        return InputError(f"access denied to {name}", hint=_ENV_HINT[extra])
    detail = _clean(str(exc).strip() or type(exc).__name__, url)
    if len(detail) > 300:
        detail = detail[:300] + "..."
    return InputError(f"cannot read {name}: {type(exc).__name__}: {detail}", hint=_ENV_HINT[extra])


_SIZES: dict[str, int] = {}
"""Sizes of the remote files the last expansions listed (URL -> bytes), so that progress and the
default number of workers cost no request per file."""


def _files(entries: Any, prefix: str) -> list[str]:
    """URLs of the plain, non-hidden files among fsspec ``entries`` (a dict or list of infos),
    sorted; their sizes are remembered in :data:`_SIZES`."""
    infos = entries.values() if isinstance(entries, dict) else entries
    out = []
    for info in infos:
        name = str(info["name"]).rstrip("/")
        if info.get("type") != "file" or name.rsplit("/", 1)[-1].startswith("."):
            continue
        url = prefix + name
        if isinstance(info.get("size"), int):
            _SIZES[url] = info["size"]
        out.append(url)
    return sorted(out)


def expand_url(spec: str) -> list[str]:
    """The files ``spec`` names: itself, a glob's matches or a prefix's files, sorted, as URLs.

    An https URL is taken as one file (its query string is not a glob).

    Raises:
        InputError: nothing matches, the file is missing, or the store refused (credentials
            never in the message).
        UsageError: the scheme's extra is not installed.
    """
    scheme = scheme_of(spec) or ""
    if SCHEMES.get(scheme) == "http":
        _extra(scheme)
        return [spec]
    fs, path = filesystem(spec)
    prefix = f"{scheme}://"
    try:
        if glob.has_magic(path):
            found = _files(fs.glob(path, detail=True), prefix)
            if not found:
                raise InputError(f"no log files match {shown(spec)}", hint="check the pattern and quote it")
            return found
        info = fs.info(path)
        if info.get("type") == "directory":
            found = _files(fs.ls(path, detail=True), prefix)
            if not found:
                raise InputError(f"log directory {shown(spec)} has no files")
            return found
    except InputError:
        raise
    except Exception as exc:  # the storage library's own errors (botocore, aiohttp, azure...)
        raise _failed(spec, exc) from None
    if isinstance(info.get("size"), int):
        _SIZES[spec] = info["size"]
    return [spec]


def remote_size(url: str) -> int | None:
    """The size of a remote file in bytes (None when the store does not say); a file an expansion
    listed costs no request."""
    if url in _SIZES:
        return _SIZES[url]
    try:
        fs, path = filesystem(url)
        size = fs.size(path)
    except Exception:
        return None
    return int(size) if size is not None else None


class RemoteFile(io.RawIOBase):
    """A remote file as a seekable raw stream whose storage errors are :class:`InputError` s
    naming the file (credentials scrubbed); ``size`` is its length in bytes when known."""

    def __init__(self, url: str, handle: Any) -> None:
        super().__init__()
        self.url = url
        self._f = handle
        size = getattr(handle, "size", None)
        self.size: int | None = int(size) if isinstance(size, int) else None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self._f.read(len(buffer))
        except Exception as exc:
            raise _failed(self.url, exc) from None
        n = len(data)
        buffer[:n] = data
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        try:
            return int(self._f.seek(offset, whence))
        except Exception as exc:
            raise _failed(self.url, exc) from None

    def tell(self) -> int:
        return int(self._f.tell())

    def close(self) -> None:
        if not self.closed:
            try:
                self._f.close()
            finally:
                super().close()


def upload(local: str, url: str) -> None:
    """Copy the local file ``local`` to ``url`` in one put (an object appears whole or not at all).

    Raises:
        UsageError: the upload failed (the message names the URL without credentials), or the
            scheme's extra is not installed.
    """
    fs, path = filesystem(url)
    try:
        fs.put_file(local, path)
    except Exception as exc:
        err = _failed(url, exc)
        raise UsageError(str(err).replace("cannot read", "cannot write", 1), hint=err.hint) from None


def open_remote(url: str, *, block_size: int = BLOCK_BYTES) -> RemoteFile:
    """A seekable binary file reading ``url`` in blocks of ``block_size`` bytes (never whole).

    Raises:
        InputError: the file cannot be opened (missing, refused, unreachable).
        UsageError: the scheme's extra is not installed.
    """
    fs, path = filesystem(url)
    try:
        handle = fs.open(path, "rb", block_size=block_size, cache_type="readahead")
    except Exception as exc:
        raise _failed(url, exc) from None
    return RemoteFile(url, handle)
