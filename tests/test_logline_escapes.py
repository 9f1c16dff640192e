"""Escaped spellings of control characters are normalised like the real ones."""
from triage.evidence.logline import strip_ansi


def test_rsyslog_octal_escapes():
    assert strip_ansi("#033[0;36mINFO#033[0m loading") == "INFO loading"
    assert strip_ansi("Traceback:#011File x") == "Traceback: File x"
    assert strip_ansi("line end#015") == "line end"
    assert strip_ansi("see #0115 and #0123") == "see #0115 and #0123"


def test_textual_escape_sequences():
    assert strip_ansi("\\x1b[31mERROR\\x1b[0m x") == "ERROR x"
    assert strip_ansi("\\u001b[1mWARN\\u001b[0m") == "WARN"
    assert strip_ansi("\\033[32mok\\033[0m") == "ok"
    assert strip_ansi("\x1b[1mB\x1b[0m") == "B"
