"""Mask secrets before anything leaves the process: every stream, JSON document and file.

`redact_output(value)` is the one masking function the outputs go through (the CLI's stdout and
stderr, `--json`, the timeline and postmortem files, error messages): secrets as below, plus
request prompts and generated text as vLLM's request logger and OpenAI-style JSON bodies carry
them (`prompt: '...'`, `prompt_token_ids: [...]`, `"content": "..."`). `redact(value)` masks
secrets only; the audit log uses it for arguments and step outputs.

Both are pure: they return a new value (strings, bytes, dicts, lists, tuples, dataclasses) and
never mutate their input. Masks are `***`, keeping a short hint of the secret's kind (`hf_***`,
`sk-***`, `AKIA***`, `Bearer ***`, `eyJ***`) so a reader can tell what was there. Masking twice
changes nothing.

What counts as a secret:
* flags that take one (`--api-key X`, `--hf-token=X`, `--ssl-keyfile-password X`, any
  `--*-password`, `--*-token`, `--*-secret`, `--*-key`), also as Python reprs
  (`api_key='X'`, `Namespace(api_key='X')`, `['--api-key', 'X']`); the value is masked whatever
  its first character (`--ssl-keyfile-password -Sx...`);
* `KEY=value` / `key: value` / `"key": "value"` pairs whose name says secret (HF_TOKEN,
  AWS_SECRET_ACCESS_KEY, db_password, pw, pwd, passwd, AccountKey, X-Amz-Signature, ...). Names
  are read as whole words: `time_per_token`, `max_tokens`, `token_count` are not secrets;
* URL passwords (`https://user:PASSWORD@host`) and token query parameters (`?token=`,
  `&access_token=`, `&sig=`, `?key=`, `X-Amz-Signature=`, ...);
* bearer / authorization headers, bare JWTs, private key blocks;
* cloud and service keys by their shape (AWS AKIA/ASIA ids, GCP `AIza`, GitHub `gh*_`,
  GitLab `glpat-`, Hugging Face `hf_`, OpenAI/Anthropic `sk-`, Slack `xox*-`, Stripe, Google
  OAuth `ya29.`, npm).

Every pattern is linear in the length of its input: each starts at a boundary its first class
cannot continue (a lookbehind on that class), no two quantifiers in a row range over the same
characters, and `key=value` pairs are found by a scanner that looks at a value only after a
secret name, so a line of any length costs time in proportion to its length.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from enum import Enum
from typing import Any, Callable, Mapping

from .lazyre import lazy

MASK = "***"


class _Lazy:
    """A pattern compiled on first use: the shapes below run only when a literal they need is in
    the text, and most outputs hold none, so a cold `triage classify` need not compile them."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.source, self.flags = pattern, flags

    @functools.cached_property
    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.source, self.flags)

    def sub(self, repl: Any, text: str) -> str:
        return self.compiled.sub(repl, text)

    def match(self, text: str) -> re.Match[str] | None:
        return self.compiled.match(text)

# Key names whose values are secrets, read as whole words: a name is split into words at `_`, `-`,
# spaces and camelCase (`X-Amz-Signature`, `accessToken`, `AccountKey`; a dotted name is read by its
# last part). These words name a secret wherever they stand (db_password, AWS_SECRET_ACCESS_KEY,
# OPENAI_API_KEY, client_secret), and a last word ending in one is a secret too (dbpassword):
_SECRET_WORDS = frozenset({"secret", "password", "passwd", "passphrase", "apikey", "accountkey", "accesskey",
                           "secretkey", "privatekey", "sharedaccesskey", "sharedaccesssignature", "clientsecret"})
_SECRET_ENDINGS = tuple(sorted(_SECRET_WORDS))
_SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("secret", "key"), ("private", "key"),
                           ("account", "key")})
# ... these only as the last word, which says what the value is (`hf_token`, `x-auth-token`, `sig`,
# `X-Amz-Credential`): `token_count`, `auth_type` and `sig_figs` are not secrets ...
_LAST_WORDS = frozenset({"token", "sig", "signature", "auth", "authorization", "credential", "credentials",
                         "cookie", "pw", "pwd"})
# ... and a last word `token` is a statistic or a tokenizer's, not a credential, after one of these
# (time_per_token, time_to_first_token, eos_token): plurals (max_tokens) are never secrets.
_NOT_TOKEN_AFTER = frozenset({"per", "first", "next", "last", "output", "input", "prompt", "generated", "eos",
                              "bos", "pad", "unk", "sep", "cls", "mask", "start", "end", "stop", "special", "inter"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD_SPLIT = re.compile(r"[_\-\s]+")
# Names that look like one but are not: the shell's working directory (`pwd=` is a password).
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})
# In a URL's query string a short name can be a key too (`?key=AIza...`, an OAuth `&code=`).
_QUERY_SECRET_NAMES = frozenset({"key", "code", "pass"})

_W = r"A-Za-z0-9_\-"          # the characters of most token shapes
# Known secret shapes, wherever they appear in text: (pattern, mask). Each starts where the run of
# its own characters starts, so a long run is scanned once.
_SHAPES: list[tuple[_Lazy, str]] = [
    (_Lazy(rf"(?<![{_W}])hf_[A-Za-z0-9]{{30,}}"), "hf_" + MASK),                  # Hugging Face
    (_Lazy(rf"(?<![{_W}])sk-[A-Za-z0-9_\-]{{16,}}"), "sk-" + MASK),               # OpenAI, Anthropic
    (_Lazy(rf"(?<![{_W}])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{{16,}}"), "sk_" + MASK),   # Stripe
    (_Lazy(rf"(?<![{_W}])gh[pousr]_[A-Za-z0-9]{{30,}}"), "gh_" + MASK),           # GitHub
    (_Lazy(rf"(?<![{_W}])github_pat_[A-Za-z0-9_]{{30,}}"), "gh_" + MASK),
    (_Lazy(rf"(?<![{_W}])glpat-[A-Za-z0-9_\-]{{20,}}"), "glpat-" + MASK),         # GitLab
    (_Lazy(rf"(?<![{_W}])npm_[A-Za-z0-9]{{36,}}"), "npm_" + MASK),                # npm
    (_Lazy(rf"(?<![{_W}])xox[abposr]-[A-Za-z0-9\-]{{10,}}"), "xox-" + MASK),      # Slack
    (_Lazy(rf"(?<![{_W}])AIza[A-Za-z0-9_\-]{{30,}}"), "AIza" + MASK),             # Google API key
    (_Lazy(rf"(?<![{_W}.])ya29\.[A-Za-z0-9_\-]{{20,}}"), "ya29." + MASK),         # Google OAuth
    (_Lazy(r"(?<![A-Za-z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}(?![0-9A-Za-z])"),
     "AKIA" + MASK),                                                                   # AWS key ids
    # A JWT: three base64url parts; the first two are JSON objects (`{"` is `eyJ`).
    (_Lazy(rf"(?<![{_W}.])eyJ[{_W}]{{6,}}\.[{_W}]{{6,}}\.[{_W}]*"), "eyJ" + MASK),
]
# The literals one of which each shape above must contain, in its order: a text holding none is
# not scanned (a regex led by a lookbehind is tried at every position; `in` runs at C speed).
_SHAPE_LITERALS: tuple[tuple[str, ...], ...] = (
    ("hf_",), ("sk-",), ("_live_", "_test_"), ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), ("github_pat_",),
    ("glpat-",), ("npm_",), ("xox",), ("AIza",), ("ya29.",),
    ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA"), ("eyJ",),
)
# -----BEGIN RSA PRIVATE KEY----- ... -----END RSA PRIVATE KEY----- (PEM, OpenSSH, PGP); a block
# cut before its END is masked to the end of the text.
_PRIVATE_KEY = _Lazy(
    r"(?P<begin>-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)(?:[^-]|-(?!----END [A-Z0-9 ]{0,40}PRIVATE KEY))*"
    r"(?P<end>-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|$)")
# A bare value's characters: a backslash only with the character it escapes and never before a
# quote, so that masking text that holds serialised JSON (`password=\"x\"`) cannot cut an escape.
_BARE = r"(?:[^\s\"'&;,\\]|\\[^\s\"'])"
# A value quoted inside a JSON string (`password=\"hunter two\"`): masked whole, escapes kept.
_ESCAPED_QUOTED = r"\\\"(?:[^\"\\\n]|\\[^\"\n])*(?:\\\")?"
# `Authorization: Bearer xyz` (any scheme, or none); then a bare `Bearer xyz` anywhere.
_AUTH_HEADER = _Lazy(
    r"(?i)(?<![A-Za-z0-9_\-])((?:proxy-)?authorization(?:\\?[\"'])?[ \t]*[:=][ \t]*(?:\\?[\"'])?)"
    r"(?:(bearer|basic|token|digest)[ \t]+)?((?:[^\s\"',;\\]|\\[^\s\"'])+)"
)
_BEARER = _Lazy(r"(?i)(?<![A-Za-z0-9_\-])(bearer)[ \t]+([A-Za-z0-9._~+/=\-]{8,})")
# scheme://user:PASSWORD@host. The password may hold "/" and "+" (an AWS secret key written raw
# into s3://KEY:SECRET@bucket); it stops at ":" so that a run of "x://a:" pieces is scanned once.
_URL_PASSWORD = _Lazy(r"(?i)(?<![a-z0-9+.\-])([a-z][a-z0-9+.\-]*://[^\s/:@]*):([^\s@:]+)@")
# The name and separator of `KEY=value`, `key: value`, `"key": "value"`, `--api-key=value`; the
# value is read by _VALUE only after a secret name (see _mask_pairs).
_PAIR = re.compile(r"(?<![A-Za-z0-9_.\-])(?P<key>-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*)(?P<q>(?:\\?[\"'])?)"
                   r"(?P<sep>[ \t]*[=:][ \t]*)")
_VALUE = lazy(_ESCAPED_QUOTED + r"|\"(?:[^\"\\\n]|\\.)*\"?|'(?:[^'\\\n]|\\.)*'?|\[[^\]\n]*\]?|"
              + _BARE + "+")
# --api-key value, and ['--api-key', 'value'] in a list repr (inside one string, e.g. a logged
# command line). Every flag is found; only a secret one's value is read, whatever its first
# character (`--ssl-keyfile-password -Sx...`), so a harmless flag never swallows the next one.
_FLAG_AT = re.compile(r"(?<![A-Za-z0-9_.\-])--?[A-Za-z][A-Za-z0-9_.\-]*")
_FLAG_ARG = lazy(r"(?P<sp>(?<![ \t])[ \t]+|\\?[\"'],[ \t]*)(?P<val>" + _ESCAPED_QUOTED
                 + r"|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|(?:[^\s\"'\\]|\\[^\s\"'])+)")
_FLAG = re.compile(r"^--?([A-Za-z][A-Za-z0-9_.\-]*)$")
_SCHEME = _Lazy(r"(?i)(bearer|basic|token|digest)\s+\S")

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

# Values that cannot be a secret: a logged config prints `api_key=None`, `allow_credentials=False`.
_NOT_SECRET = frozenset({"none", "null", "true", "false", "''", '""', "[]", "{}", "[none]", MASK.lower()})


# Every secret name holds one of these: a cheap test first, as a hostile line can hold many names.
_HINTS = ("tok", "secret", "pass", "pw", "key", "sig", "auth", "cred", "cookie")


@functools.lru_cache(maxsize=4096)
def is_secret_key(name: str) -> bool:
    """True when a dict key, env var, or flag name names a secret (case-insensitive, whole words)."""
    if not any(h in name.lower() for h in _HINTS):
        return False
    # A dotted name is named by its last part: `db.password` is a password, `secret.log` a file.
    bare = name.strip().strip("-\"'").rsplit(".", 1)[-1]
    if bare in _NOT_SECRET_NAMES:
        return False
    words = [w for w in _WORD_SPLIT.split(_CAMEL.sub("_", bare).lower()) if w]
    if not words:
        return False
    if any(w in _SECRET_WORDS for w in words) or any(p in _SECRET_PAIRS for p in zip(words, words[1:])):
        return True
    if _secret_last_word(words):
        return True
    # `--foo-key` on a command line and `FOO_KEY` in an environment hold keys (`--ssl-keyfile`
    # does not end in "key"); a lone `key` says too little.
    return len(words) > 1 and words[-1] == "key" and (name.lstrip().startswith("--") or bare.isupper())


def _secret_last_word(words: list[str]) -> bool:
    last = words[-1]
    if last.endswith("token") and not last.endswith("pertoken"):        # hf_token, accesstoken
        return len(words) == 1 or words[-2] not in _NOT_TOKEN_AFTER
    return last in _LAST_WORDS or last.endswith(_SECRET_ENDINGS)


def mask(secret: str) -> str:
    """The mask for one secret value, keeping a hint of its kind (quotes kept)."""
    if len(secret) >= 4 and secret.startswith('\\"') and secret.endswith('\\"'):
        return '\\"' + mask(secret[2:-2]) + '\\"'       # quoted inside a JSON string
    if len(secret) >= 2 and secret[0] == secret[-1] and secret[0] in "\"'":
        return secret[0] + mask(secret[1:-1]) + secret[0]
    scheme = _SCHEME.match(secret)
    if scheme:
        return f"{scheme.group(1)} {MASK}"
    for prefix in ("hf_", "sk-", "gh_", "AKIA", "ASIA", "AIza", "eyJ", "xox"):
        if secret.startswith(prefix):
            return prefix + MASK
    if re.match(r"gh[pousr]_", secret):
        return "gh_" + MASK
    return MASK


def redact_text(text: str) -> str:
    """Mask every secret found in one string."""
    if not text:
        return text
    # Each pattern runs only where a literal it needs is in the text: most log text holds none.
    if "-----BEGIN " in text:
        text = _PRIVATE_KEY.sub(lambda m: f"{m.group('begin')} {MASK} {m.group('end')}".rstrip(), text)
    lowered = text.lower()
    if "authorization" in lowered:
        text = _AUTH_HEADER.sub(_auth_header, text)
    if "bearer" in lowered:
        text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    for (pattern, replacement), literals in zip(_SHAPES, _SHAPE_LITERALS):
        if any(lit in text for lit in literals):
            text = pattern.sub(replacement, text)
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    text = _mask_pairs(text)
    return _mask_flags(text)


def redact_argv(argv: list[Any] | tuple[Any, ...]) -> list[Any]:
    """Mask `--api-key X` pairs across items, and secrets inside each item."""
    return _argv(argv, redact)


def redact(value: Any) -> Any:
    """A copy of `value` with secrets masked: strings, bytes, and nested dicts/lists/tuples/dataclasses."""
    return _walk(value, _Masker(redact_text, prompts=False))


def mask_prompts(text: str) -> str:
    """Mask request prompts, generated text and token ids in one string (secrets untouched)."""
    if "prompt" not in text and "output" not in text and '"' not in text:
        return text                  # each pattern below names a prompt, an output or a JSON key
    text = _PROMPT_REPR.sub(lambda m: m.group("key") + _quoted_mask(m.group("val")), text)
    text = _TOKEN_IDS.sub(lambda m: f"{m.group('key')}[{MASK}]", text)
    return _JSON_TEXT.sub(lambda m: m.group("key") + (f"[{MASK}]" if m.group("val").startswith("[")
                                                      else f'"{MASK}"'), text)


def redact_output(value: Any) -> Any:
    """`redact`, then request prompts masked too: what every output of the tool goes through."""
    return _walk(value, _Masker(lambda s: mask_prompts(redact_text(s)), prompts=True))


def mask_text(text: str) -> str:
    """`redact_output` for one string (a line about to be printed, an error message)."""
    return mask_prompts(redact_text(text))


# -- walking values ------------------------------------------------------------------------------

@dataclasses.dataclass
class _Masker:
    """One masking pass over an output document: the masked copy of each record met, each key masked once."""
    text: Callable[[str], str]
    prompts: bool                                   # mask the values of prompt-like keys whole
    seen: dict[int, Any] = dataclasses.field(default_factory=dict)   # id -> masked copy (shared records)
    keys: dict[str, str] = dataclasses.field(default_factory=dict)   # key -> masked key


def _walk(value: Any, m: _Masker) -> Any:
    if isinstance(value, Enum) or value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return m.text(value)
    if isinstance(value, (bytes, bytearray)):
        return m.text(bytes(value).decode("utf-8", errors="replace"))
    if isinstance(value, Mapping):
        # keys too: a label set, a URL or a command line can be a key
        return {_key(k, m): _item(k, v, m) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        out = _argv(value, lambda v: _walk(v, m))
        if hasattr(value, "_fields"):             # a named tuple keeps its type
            return type(value)(*out)
        return tuple(out) if isinstance(value, tuple) else out
    if isinstance(value, (set, frozenset)):
        return [_walk(v, m) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _dataclass(value, m)
    return value


def _dataclass(value: Any, m: _Masker) -> Any:
    """A copy with every init field masked; one copy per object, so records shared between a
    verdict's steps and its evidence stay shared."""
    if id(value) in m.seen:
        return m.seen[id(value)]
    changes = {f.name: _walk(getattr(value, f.name), m) for f in dataclasses.fields(value) if f.init}
    try:
        copy = dataclasses.replace(value, **changes)
    except (TypeError, ValueError):
        copy = value                               # a dataclass that cannot be rebuilt: left as it is
    m.seen[id(value)] = copy
    return copy


def _key(key: Any, m: _Masker) -> Any:
    if not isinstance(key, str):
        return key
    if key not in m.keys:                           # a document repeats its few keys many times
        m.keys[key] = m.text(key)
    return m.keys[key]


def _item(key: Any, value: Any, m: _Masker) -> Any:
    if isinstance(key, str):
        if m.prompts and key.lower() in _PROMPT_KEYS and value:
            return MASK
        if is_secret_key(key) and isinstance(value, (str, bytes, bytearray)):
            text = value if isinstance(value, str) else bytes(value).decode("utf-8", errors="replace")
            return mask(text) if text and text.lower() not in _NOT_SECRET else m.text(text)
    return _walk(value, m)


def _argv(argv: list[Any] | tuple[Any, ...], each: Callable[[Any], Any]) -> list[Any]:
    out: list[Any] = []
    hide_next = False
    for item in argv:
        if hide_next and isinstance(item, str) and item.lower() not in _NOT_SECRET:
            out.append(mask(item))
        else:
            out.append(each(item))
        flag = _FLAG.match(item) if isinstance(item, str) else None
        hide_next = bool(flag and is_secret_key(item))
    return out


# -- the text rules --------------------------------------------------------------------------------

def _mask_pairs(text: str) -> str:
    """Mask the value of every `name<sep>value` whose name is a secret's. A scanner rather than
    one substitution: a non-secret name gives up only its separator, so `note: api_key=X` still
    finds `api_key=X`, and a value is read only after a secret name (linear on `a=a=a=...`)."""
    out: list[str] = []
    pos = 0
    for m in _PAIR.finditer(text):
        if m.start() < pos:
            continue                                  # inside a value already masked
        key = m.group("key")
        query = m.start() > 0 and text[m.start() - 1] in "?&;" and key.lower() in _QUERY_SECRET_NAMES
        if not (query or is_secret_key(key)) or key.lower().endswith("authorization"):   # headers done above
            continue
        value = _VALUE.match(text, m.end())
        if value is None or not value.group(0):
            continue
        val = value.group(0)
        core = val.rstrip(",.:)}]") if not val.startswith("[") else val   # the sentence goes on after it
        if core.lower() in _NOT_SECRET or not core:
            continue
        out.append(text[pos:m.end()])
        out.append(mask(core) + val[len(core):])
        pos = value.end()
    out.append(text[pos:])
    return "".join(out)


def _quoted_mask(value: str) -> str:
    quote = value[0]
    return f"{quote}{MASK}{quote}"


def _auth_header(m: re.Match[str]) -> str:
    scheme = f"{m.group(2)} " if m.group(2) else ""
    return f"{m.group(1)}{scheme}{MASK}"


def _mask_flags(text: str) -> str:
    """Mask the value after every secret flag (`--api-key X`, `'--hf-token', 'X'`), whatever it
    starts with. A scanner, like _mask_pairs: a value is read only after a secret flag's name."""
    if "-" not in text:
        return text
    out: list[str] = []
    pos = 0
    for m in _FLAG_AT.finditer(text):
        if m.start() < pos or not is_secret_key(m.group(0)):
            continue                                  # inside a value already masked, or harmless
        arg = _FLAG_ARG.match(text, m.end())
        if arg is None or arg.group("val").lower() in _NOT_SECRET:
            continue
        if _FLAG.match(arg.group("val")) and is_secret_key(arg.group("val")):
            continue                                  # `--api-key --hf-token X`: X is the value to mask
        out.append(text[pos:arg.start("val")])
        out.append(mask(arg.group("val")))
        pos = arg.end()
    out.append(text[pos:])
    return "".join(out)


__all__ = ["MASK", "is_secret_key", "mask", "mask_prompts", "mask_text", "redact", "redact_argv",
           "redact_output", "redact_text"]
