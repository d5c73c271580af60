"""Secret redaction for messages, logs and reprs."""
from __future__ import annotations

import re

from causal_assets.core.foundation.urls import MASK as REDACTED
from causal_assets.core.foundation.urls import without_credentials

_BEARER = re.compile(r"(?i)(bearer\s+)[^\s'\",}]+")
_SK = re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}")
_BASIC = re.compile(r"(?i)(basic\s+)[A-Za-z0-9+/=]{8,}")


class Secret:
    """Holds a secret string; never shows it in repr/str."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None):
        self._value = value

    def get(self) -> str | None:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')" if self._value else "Secret(None)"

    __str__ = __repr__

    def __reduce__(self):  # refuse to pickle the secret into other processes / files by accident
        raise TypeError("Secret cannot be pickled")


def redact(text: object, *secrets: str | None) -> str:
    """`text` as a string with every given secret, any `Bearer <token>` / `Basic <token>`, the credentials of any
    `scheme://user:pass@` URL and any `sk-...` token masked."""
    s = str(text)
    for secret in secrets:
        if secret:
            s = s.replace(secret, REDACTED)
    s = _BEARER.sub(lambda m: m.group(1) + REDACTED, s)
    s = _BASIC.sub(lambda m: m.group(1) + REDACTED, s)
    s = without_credentials(s)
    return _SK.sub(REDACTED, s)

