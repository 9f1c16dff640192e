"""Evidence: every input turned into typed, timestamped records, by one parser per source kind.

The package's parts, by job:
- registry: the parser modules and how one is picked (content decides, not the file name);
- inputs: command-line paths into inputs (directories walked, archives read in place, streams spooled);
- screening: which inputs are not read, and the warnings for them;
- timebase, year_alignment: what year-less log times are read against, and logs re-read in the
  year of the bundle's dated evidence;
- metrics_url: a live --metrics-url scrape as one more input;
- load: `load_evidence`, which routes every input to its parser.
The parsers themselves: prometheus, memory_stats, nvidia_smi, kubernetes, alertmanager, logs.
"""
from __future__ import annotations

from .inputs import ArchiveBundle, expand
from .load import LIST_ERRORS, NothingUsable, failed_all, load_evidence
from .metrics_url import MAX_SCRAPE_BYTES, SCRAPE_TIMEOUT_ENV, SCRAPE_TIMEOUT_S, scrape, scrape_timeout
from .registry import PARSER_MODULES, parsers, pick_parser
from .screening import LIST_EMPTY, LIST_SKIPPED, SKIP_EXAMPLES
# Their names before screening.py; triage.multi imports them from here.
from .screening import NOT_EVIDENCE_EXTENSIONS as _NOT_EVIDENCE_EXT  # noqa: F401
from .screening import NOT_EVIDENCE_NAMES as _NOT_EVIDENCE  # noqa: F401
from .screening import is_derived as _derived  # noqa: F401
from .timebase import read_bundle_meta, time_reference
from .year_alignment import FAR_APART_DAYS, WEAK_YEAR_SOURCES

__all__ = [
    "ArchiveBundle", "FAR_APART_DAYS", "LIST_EMPTY", "LIST_ERRORS", "LIST_SKIPPED", "MAX_SCRAPE_BYTES",
    "NothingUsable", "PARSER_MODULES", "SCRAPE_TIMEOUT_ENV", "SCRAPE_TIMEOUT_S", "SKIP_EXAMPLES",
    "WEAK_YEAR_SOURCES", "expand", "failed_all", "load_evidence", "parsers", "pick_parser", "read_bundle_meta",
    "scrape", "scrape_timeout", "time_reference",
]
