"""Mask secrets in audit arguments and outputs before anything is written to disk.

`redact(value)` is pure: it returns a new value (strings, dicts, lists, tuples) and never mutates
its input. Masks are `***`, keeping a short hint of the secret's kind (`hf_***`, `sk-***`,
`AKIA***`, `Bearer ***`) so a reader can tell what was there. Redacting twice changes nothing.

`redact_output(value)` is what every derived document (postmortem, timeline export) goes through:
secrets as above, plus request prompts and generated text as vLLM's request logger and the
OpenAI-style JSON bodies carry them (`prompt: '...'`, `prompt_token_ids: [...]`, `"content": "..."`).
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


# Request/response text as vLLM's request logger prints it (a Python repr, so quotes are escaped
# inside and the value ends at the closing quote; a line cut short ends the value too).
_PROMPT_REPR = re.compile(
    r"(?P<key>\b(?:prompt|output|prompt_embeds)\s*:\s*)"
    r"(?P<val>'(?:[^'\\\n]|\\.)*(?:'|$)|\"(?:[^\"\\\n]|\\.)*(?:\"|$))", re.MULTILINE)
# Token ids decode back to the text: `prompt_token_ids: [1, 2, ...]`, `prompt token ids: [...]`.
_TOKEN_IDS = re.compile(r"(?P<key>\b(?:prompt|output)[ _]token[ _]ids\s*[:=]\s*)\[[^\]\n]*(?:\]|$)",
                        re.MULTILINE)
# OpenAI-style request bodies in JSON: "prompt": "...", "content": "...", "prompt": ["...", ...].
_JSON_TEXT = re.compile(
    r"(?P<key>\"(?:prompt|prompts|content|input|messages|prompt_token_ids)\"\s*:\s*)"
    r"(?P<val>\"(?:[^\"\\\n]|\\.)*(?:\"|$)|\[[^\[\]\n]*\])", re.MULTILINE)
_PROMPT_KEYS = frozenset({"prompt", "prompts", "messages", "content", "input", "prompt_token_ids",
                          "output_token_ids", "prompt_embeds"})


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


def mask_prompts(text: str) -> str:
    """Mask request prompts, generated text and token ids in one string (secrets untouched)."""
    text = _PROMPT_REPR.sub(lambda m: m.group("key") + _quoted_mask(m.group("val")), text)
    text = _TOKEN_IDS.sub(lambda m: f"{m.group('key')}[{MASK}]", text)
    return _JSON_TEXT.sub(lambda m: m.group("key") + (f"[{MASK}]" if m.group("val").startswith("[")
                                                      else f'"{MASK}"'), text)


def redact_output(value: Any) -> Any:
    """`redact`, then request prompts masked too: for documents written from an incident."""
    if isinstance(value, str):
        return mask_prompts(redact_text(value))
    if isinstance(value, (bytes, bytearray)):
        return redact_output(bytes(value).decode("utf-8", errors="replace"))
    if isinstance(value, Mapping):
        return {k: (MASK if isinstance(k, str) and k.lower() in _PROMPT_KEYS and value[k]
                    else _redact_output_item(k, v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        out = [mask_prompts(v) if isinstance(v, str) else redact_output(v) for v in redact_argv(value)]
        return tuple(out) if isinstance(value, tuple) else out
    if isinstance(value, (set, frozenset)):
        return [redact_output(v) for v in value]
    return value


def _redact_output_item(key: Any, value: Any) -> Any:
    if isinstance(key, str) and is_secret_key(key) and isinstance(value, (str, bytes, bytearray)):
        return _redact_item(key, value)
    return redact_output(value)


def _quoted_mask(value: str) -> str:
    quote = value[0]
    return f"{quote}{MASK}{quote}"


def _redact_item(key: Any, value: Any) -> Any:
    if isinstance(key, str) and is_secret_key(key) and isinstance(value, (str, bytes, bytearray)):
        text = value if isinstance(value, str) else bytes(value).decode("utf-8", errors="replace")
        return mask(text) if text else text
    return redact(value)


def _auth_header(m: re.Match[str]) -> str:
    scheme = f"{m.group(2)} " if m.group(2) else ""
    return f"{m.group(1)}{scheme}{MASK}"


# Values that cannot be a secret: a logged config prints `api_key=None`, `allow_credentials=False`.
_NOT_SECRET = frozenset({"none", "null", "true", "false", "''", '""', "[]", "{}", MASK.lower()})


def _key_value(m: re.Match[str]) -> str:
    key = m.group("key")
    if not is_secret_key(key) or key.lower().endswith("authorization"):  # headers done above
        return m.group(0)
    if m.group("val").lower().rstrip(",)") in _NOT_SECRET:
        return m.group(0)
    return f"{key}{m.group('q')}{m.group('sep')}{mask(m.group('val'))}"


def _flag_value(m: re.Match[str]) -> str:
    if not is_secret_key(m.group("flag")):
        return m.group(0)
    return f"{m.group('flag')}{m.group('sp')}{mask(m.group('val'))}"


__all__ = ["MASK", "is_secret_key", "mask", "mask_prompts", "redact", "redact_argv", "redact_output",
           "redact_text"]
