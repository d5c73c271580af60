"""Credentials in URLs (`http://user:pass@host/...`): whether a URL carries them, and the URL with them masked for
messages. Its own module, without dependencies, so the settings can check a URL without loading the LLM client."""
from __future__ import annotations

import re
from urllib.parse import urlsplit

MASK = "***REDACTED***"
USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@'\"]+@")


def has_credentials(url: str) -> bool:
    """Whether `url` carries a user or a password."""
    try:
        parts = urlsplit(url)
        return bool(parts.username or parts.password)
    except ValueError:   # an unparsable netloc (a bad port, brackets): judged by its text
        return bool(USERINFO.search(url))


def without_credentials(text: str) -> str:
    """`text` with the user and password of every `scheme://user:pass@` URL in it masked."""
    return USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
