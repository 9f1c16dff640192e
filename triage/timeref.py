"""Turning the timestamps of each source into UTC.

vLLM prints `MM-DD HH:MM:SS` with no year and no zone (local time of the container). The year
comes from a reference date (incident.yaml `created`, `--year`, or the file's mtime); a date
that would land after the reference is taken from the year before (a December log read in
January). The zone defaults to UTC unless incident.yaml or `--tz` says otherwise. The choice
is recorded so that the output can show it.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo

UTC = timezone.utc


@dataclass(frozen=True)
class TimeReference:
    reference: datetime                  # aware; the latest plausible time of the evidence
    year_source: str                     # "incident.yaml", "--year", "file mtime", "today"
    tz: tzinfo = UTC                     # zone of year-less / zone-less stamps
    tz_source: str = "assumed UTC"
    forced_year: int | None = None

    def note(self) -> str:
        year = self.forced_year or self.reference.year
        return f"year-less times read as {year} ({self.year_source}); zone {self.tz_source}"

    def resolve(self, month: int, day: int, hour: int, minute: int, second: int,
                micro: int = 0) -> datetime | None:
        """A year-less local stamp -> an aware UTC datetime."""
        year = self.forced_year or self.reference.astimezone(self.tz).year
        if month == 2 and day == 29 and not self.forced_year:
            while not _leap(year):   # the latest Feb 29 at or before the reference
                year -= 1
        try:
            local = datetime(year, month, day, hour, minute, second, micro, tzinfo=self.tz)
        except ValueError:
            return None
        if self.forced_year is None and local > self.reference + timedelta(days=2) and not (month == 2 and day == 29):
            try:
                local = local.replace(year=year - 1)
            except ValueError:
                return None
        return local.astimezone(UTC)

    def localize(self, naive: datetime) -> datetime:
        """A zone-less full stamp (with year) -> UTC."""
        if naive.tzinfo is not None:
            return naive.astimezone(UTC)
        return naive.replace(tzinfo=self.tz).astimezone(UTC)

    def with_reference(self, when: datetime, source: str) -> "TimeReference":
        if self.forced_year is not None or self.year_source == "incident.yaml":
            return self
        return TimeReference(when, source, self.tz, self.tz_source, self.forced_year)


def _leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def default_reference(year: int | None = None, tz: tzinfo | None = None,
                      tz_source: str | None = None) -> TimeReference:
    now = datetime.now(UTC)
    return TimeReference(
        reference=now,
        year_source="--year" if year else "today",
        tz=tz or UTC,
        tz_source=tz_source or "assumed UTC",
        forced_year=year,
    )


def parse_iso(text: str) -> datetime | None:
    """RFC 3339 / ISO 8601 (with Z or offset, any fraction length) -> aware UTC, else None."""
    s = text.strip()
    if not s or s.startswith("0001-01-01"):
        return None
    if s.endswith("Z") or s.endswith("z"):
        s = s[:-1] + "+00:00"
    # Python < 3.11 accepts at most 6 fractional digits.
    if "." in s:
        head, _, rest = s.partition(".")
        digits = ""
        i = 0
        while i < len(rest) and rest[i].isdigit():
            digits += rest[i]
            i += 1
        s = f"{head}.{(digits + '000000')[:6]}{rest[i:]}"
    try:
        dt = datetime.fromisoformat(s.replace(" ", "T", 1) if "T" not in s else s)
    except ValueError:
        return None
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)
