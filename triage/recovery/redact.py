"""Mask secrets in audit arguments and outputs before anything is written to disk.

`redact(value)` is pure: it returns a new value (strings, dicts, lists, tuples) and never mutates
its input. Masks are `***`, keeping a short hint of the secret's kind (`hf_***`, `sk-***`,
`AKIA***`, `Bearer ***`) so a reader can tell what was there. Redacting twice changes nothing.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

MASK = "***"

# Key names whose values are secrets: one `_`-separated part names a secret (hf_token,
# AWS_SECRET_ACCESS_KEY, x-api-key, db_password), or a camelCase name ends with one
# (accessToken, clientSecret). "tokens", "tokenizer", "max_num_batched_tokens" are not secrets.
_SECRET_PART = re.compile(
    r"(?:^|_)(?:token(?!_ids?(?:_|$))|secret|password|passwd|passphrase|apikey|api_key|access_key|"
    r"secret_key|private_key|authorization|credentials?)(?:_|$)"
)
_SECRET_SUFFIX = ("token", "secret", "password", "apikey")

# Every pattern starts at a boundary (\b, or a lookbehind where the first class is wide), so
# long runs of word characters cost linear time, not quadratic.
# Known secret shapes, wherever they appear in text.
_SHAPES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}"), "hf_" + MASK),                    # Hugging Face
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"), "sk-" + MASK),                 # OpenAI-style
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), "gh_" + MASK),             # GitHub
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "AKIA" + MASK),           # AWS access key id
]
# `Authorization: Bearer xyz` (any scheme, or none); then a bare `Bearer xyz` anywhere.
_AUTH_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)(?:(bearer|basic|token|digest)\s+)?([^\s\"',;]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer)\s+([A-Za-z0-9._~+/=\-]{8,})")
# scheme://user:PASSWORD@host
_URL_PASSWORD = re.compile(r"(?i)(?<![a-z0-9+.\-])([a-z][a-z0-9+.\-]*://[^\s/:@]*):([^\s/]+)@")
# KEY=value, key: value, "key": "value", --api-key=value
_KEY_VALUE = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<key>-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*)(?P<q>[\"']?)(?P<sep>\s*[=:]\s*)"
    r"(?P<val>\"[^\"]*\"|'[^']*'|[^\s\"'&;,]+)"
)
# --api-key value (inside one string, e.g. a logged command line)
_FLAG_VALUE = re.compile(
    r"(?P<flag>(?<![\w-])--?[A-Za-z][A-Za-z0-9_.\-]*)(?P<sp>[ \t]+)(?P<val>\"[^\"]*\"|'[^']*'|[^\s\"'-][^\s\"']*)"
)
_FLAG = re.compile(r"^--?([A-Za-z][A-Za-z0-9_.\-]*)$")


def is_secret_key(name: str) -> bool:
    """True when a dict key, env var, or flag name names a secret (case-insensitive)."""
    key = re.sub(r"[-.\s]", "_", name.strip().strip("-\"'").lower())
    return bool(_SECRET_PART.search(key)) or key.endswith(_SECRET_SUFFIX)


def mask(secret: str) -> str:
    """The mask for one secret value, keeping a hint of its kind (quotes kept)."""
    if len(secret) >= 2 and secret[0] == secret[-1] and secret[0] in "\"'":
        return secret[0] + mask(secret[1:-1]) + secret[0]
    scheme = re.match(r"(?i)(bearer|basic|token|digest)\s+\S", secret)
    if scheme:
        return f"{scheme.group(1)} {MASK}"
    for prefix in ("hf_", "sk-", "gh_", "AKIA"):
        if secret.startswith(prefix):
            return prefix + MASK
    if re.match(r"gh[pousr]_", secret):
        return "gh_" + MASK
    return MASK


def redact_text(text: str) -> str:
    """Mask every secret found in one string."""
    for pattern, replacement in _SHAPES:
        text = pattern.sub(replacement, text)
    text = _AUTH_HEADER.sub(_auth_header, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    text = _KEY_VALUE.sub(_key_value, text)
    return _FLAG_VALUE.sub(_flag_value, text)


def redact_argv(argv: list[Any] | tuple[Any, ...]) -> list[Any]:
    """Mask `--api-key X` pairs across items, and secrets inside each item."""
    out: list[Any] = []
    hide_next = False
    for item in argv:
        if hide_next and isinstance(item, str):
            out.append(mask(item))
        else:
            out.append(redact(item))
        flag = _FLAG.match(item) if isinstance(item, str) else None
        hide_next = bool(flag and is_secret_key(flag.group(1)))
    return out


def redact(value: Any) -> Any:
    """A copy of `value` with secrets masked: strings, bytes, and nested dicts/lists/tuples."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, (bytes, bytearray)):
        return redact_text(bytes(value).decode("utf-8", errors="replace"))
    if isinstance(value, Mapping):
        return {k: _redact_item(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return redact_argv(value)
    if isinstance(value, tuple):
        return tuple(redact_argv(value))
    if isinstance(value, (set, frozenset)):
        return [redact(v) for v in value]
    return value


def _redact_item(key: Any, value: Any) -> Any:
    if isinstance(key, str) and is_secret_key(key) and isinstance(value, (str, bytes, bytearray)):
        text = value if isinstance(value, str) else bytes(value).decode("utf-8", errors="replace")
        return mask(text) if text else text
    return redact(value)


def _auth_header(m: re.Match[str]) -> str:
    scheme = f"{m.group(2)} " if m.group(2) else ""
    return f"{m.group(1)}{scheme}{MASK}"


def _key_value(m: re.Match[str]) -> str:
    key = m.group("key")
    if not is_secret_key(key) or key.lower().endswith("authorization"):  # headers done above
        return m.group(0)
    return f"{key}{m.group('q')}{m.group('sep')}{mask(m.group('val'))}"


def _flag_value(m: re.Match[str]) -> str:
    if not is_secret_key(m.group("flag")):
        return m.group(0)
    return f"{m.group('flag')}{m.group('sp')}{mask(m.group('val'))}"


__all__ = ["MASK", "is_secret_key", "mask", "redact", "redact_argv", "redact_text"]
