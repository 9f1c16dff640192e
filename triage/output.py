"""Where output leaves the process: every stream, JSON document and file goes through one
masking function (`triage.redact.redact_output`).

Two layers, because one is not enough on its own:
* values are masked before they are laid out (`mask`, `echo`, `echo_json`, the rich Console in
  console.py): a line wrap or a shortened excerpt can cut a secret so that no pattern knows it
  any more, so the whole value is masked first;
* `masked_streams()` replaces stdout and stderr for the length of a command with streams that
  mask every line written, whichever module wrote it (a warning, an error, a progress line).

A JSON document is the one exception to the second layer: `echo_json` masks every value (and
key) before it serialises, and writes the text as it is. Masking the serialised text again could
cut an escape (`\"`) and print a document no parser accepts.

Only `re` is imported at start-up: `triage classify` stays cold.
"""
from __future__ import annotations

import io
import json
import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator, TextIO

from .redact import mask_text, redact_output


def mask(value: Any) -> Any:
    """A copy of `value` (text, dict, list, dataclass) with secrets and request prompts masked."""
    return redact_output(value)


def echo(message: Any = "", *, err: bool = False, nl: bool = True) -> None:
    """click.echo, masked."""
    import click

    click.echo(mask_text(str(message)), err=err, nl=nl)


def echo_json(document: Any, **dumps: Any) -> None:
    """A JSON document on stdout, masked value by value before it is serialised (a secret
    inside an escaped string is still seen whole); the serialised text is never masked again."""
    print_verbatim(json_text(document, **dumps) + "\n")


def json_text(document: Any, **dumps: Any) -> str:
    """`document` masked value by value, then serialised: what `echo_json` prints and what a
    JSON file is written with."""
    default = dumps.pop("default", None)
    if default is not None:                          # what it turns an object into is masked as well
        dumps["default"] = lambda value: mask(default(value))
    # allow_nan=False: `Infinity` / `NaN` are not JSON; readers drop such numbers before they get here
    return json.dumps(mask(document), allow_nan=False, **dumps)


def print_verbatim(text: str) -> None:
    """Text already masked (a serialised document) on stdout as it is, past the line masking of
    masked_streams(); other text goes through `echo`."""
    out = sys.stdout
    if isinstance(out, MaskedStream):
        out.write_verbatim(text)
        out.flush()
    else:
        import click  # only here: a command under masked_streams() (all but `sim`) never needs it

        click.echo(text, nl=False)


# -- width of human output ----------------------------------------------------------------------
#
# One rule for every human output (the rich console of console.py and the plain lines of `note`,
# `audit verify` and `runbooks`):
#   1. COLUMNS, when it is set to a positive number, always wins (a terminal, a pipe or a file);
#   2. else the terminal's width, when the stream written to is a terminal;
#   3. else DEFAULT_WIDTH (80): a pipe, a file, a pager or a CI log.
# rich alone would take the width of whichever of stdin / stdout / stderr is a terminal, so
# `triage timeline X > file` run in a 200-column terminal wrote 200-column lines into the file; 80
# reads whole in a ticket, an email, a pager and a narrow terminal alike.
DEFAULT_WIDTH = 80


def output_width(stream: TextIO | None = None) -> int:
    """The width human output written to `stream` (default stdout) is laid out to (rule above)."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = sys.stdout if stream is None else stream
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or DEFAULT_WIDTH
    except (AttributeError, ValueError, OSError):
        pass
    return DEFAULT_WIDTH


def wrap_plain(text: str, *, indent: int = 4, width: int | None = None, err: bool = False) -> str:
    """`text` wrapped to the output width for a plain-text line (no rich): lines after the first
    indented by `indent` (a hanging indent); breaks only at spaces, never inside a hyphenated word
    such as a node name (`gpu-node-07`); a word wider than the line is folded, never cut short."""
    import re
    import textwrap

    width = width or output_width(sys.stderr if err else sys.stdout)
    glue = "\ue000"           # `label: 12` stays on one line (a private-use character stands in for the space)
    text = re.sub(r"(?<=:) (?=\d)", glue, text.replace(glue, " "))
    lines = textwrap.wrap(text, width=max(width, indent + 20), subsequent_indent=" " * indent,
                          break_on_hyphens=False, break_long_words=True)
    return "\n".join(lines).replace(glue, " ") or text.replace(glue, " ")


class MaskedStream(io.TextIOBase):
    """A text stream that masks what it forwards, one whole line (or flushed chunk) at a time.

    Lines are held until their newline so a secret written in two pieces is seen whole; a
    flush forwards what is held (a prompt waiting for an answer). The attributes click and rich
    look at (encoding, isatty, fileno) are the wrapped stream's; there is no `buffer`, so
    nothing can write around the mask."""

    def __init__(self, inner: TextIO) -> None:
        super().__init__()
        self.inner = inner
        self._held = ""

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.inner, "errors", None)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._held += text
        cut = self._held.rfind("\n") + 1
        if cut:
            ready, self._held = self._held[:cut], self._held[cut:]
            self.inner.write(mask_text(ready))
        return len(text)

    def write_verbatim(self, text: str) -> None:
        """Forward `text` unmasked: only for text whose values were masked before it was
        serialised (see echo_json). What was held before it goes out masked first."""
        if self._held:
            ready, self._held = self._held, ""
            self.inner.write(mask_text(ready))
        self.inner.write(text)

    def flush(self) -> None:
        if self._held:
            ready, self._held = self._held, ""
            self.inner.write(mask_text(ready))
        self.inner.flush()

    def close(self) -> None:  # the wrapped stream stays open: it belongs to the process
        self.flush()


@contextmanager
def masked_streams() -> Iterator[None]:
    """stdout and stderr masked until the block ends (then flushed and put back)."""
    saved = sys.stdout, sys.stderr
    out, err = MaskedStream(saved[0]), MaskedStream(saved[1])
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        for stream in (out, err):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass                     # a closed pipe: nothing more can be said there
        sys.stdout, sys.stderr = saved


__all__ = ["DEFAULT_WIDTH", "MaskedStream", "echo", "echo_json", "json_text", "mask", "masked_streams", "output_width",
           "print_verbatim", "wrap_plain"]
