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
# Dates outside these years are damage, not evidence (`9999-12-31T23`, year 0, 99999): refused
# where they are read, so that the arithmetic after (a day either side, a zone offset, half a
# year for alignment) can never run off the end of datetime's range.
MIN_YEAR, MAX_YEAR = 1900, 2999
# Clocks of two hosts drift: a log line a few minutes ahead of this host's clock is not "the future".
FUTURE_SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class TimeReference:
    """How year-less and zone-less log times are read: the year and zone assumed, and where each came from."""
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
        if not MIN_YEAR <= year <= MAX_YEAR:
            return None
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

    def localize(self, naive: datetime) -> datetime | None:
        """A zone-less full stamp (with year) -> UTC; None outside MIN_YEAR..MAX_YEAR."""
        if not MIN_YEAR <= naive.year <= MAX_YEAR:
            return None                     # datetime's last day west of UTC has no UTC time
        if naive.tzinfo is not None:
            return naive.astimezone(UTC)
        return naive.replace(tzinfo=self.tz).astimezone(UTC)

    def with_reference(self, when: datetime, source: str) -> "TimeReference":
        if self.forced_year is not None or self.year_source == "incident.yaml":
            return self
        return TimeReference(when, source, self.tz, self.tz_source, self.forced_year)


def in_future(moment: datetime, now: datetime | None = None) -> bool:
    """True when `moment` (aware) lies ahead of now by more than the clock skew allowed.

    A log read in the wrong zone lands hours ahead of the real time; nothing can have been
    written then, so such a time is evidence of a wrong zone, not of when something happened."""
    return moment > (now or datetime.now(UTC)) + FUTURE_SKEW


def future_warning(source: str, latest: datetime, tz_source: str | None = None, now: datetime | None = None) -> str:
    """The one line that flags a file whose times lie in the future."""
    now = now or datetime.now(UTC)
    zone = f"; zone {tz_source}" if tz_source else ""
    return (f"{source}: log times lie in the future (up to {latest:%Y-%m-%dT%H:%M:%SZ}, now "
            f"{now:%Y-%m-%dT%H:%M:%SZ}{zone}): is incident.yaml's timezone right?")


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
    if not MIN_YEAR <= dt.year <= MAX_YEAR:
        return None
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)
