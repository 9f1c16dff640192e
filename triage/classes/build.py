"""`python -m triage.classes.build`: rewrite what is generated from the classes and their data.

Run it after adding or changing a class, a cause, a runbook's `applies_to`, or one of the data
files the classifier reads on every run (phase_frames, xids, lookalikes, engine_settings,
known_bugs). It
checks the data (a file that does not load is reported and nothing is written), then writes the
compiled JSON form (classes.compiled.json) and the schemas' generated enums.
"""
from __future__ import annotations

import sys

from . import compiled, registry, schemas


def check() -> None:
    """Load every data file the way the classifier does, from its source: raises on a bad entry."""
    from ..flowchart.failure_site import parse_sites
    from ..flowchart.frames import parse_vocabulary
    from ..flowchart.knowledge import parse_bugs
    from ..flowchart.xids import parse_xids
    from .not_gpu_oom import parse_lookalikes
    from .settings import parse_settings

    parse_vocabulary(compiled.parse("phase_frames"))
    parse_sites(compiled.parse("phase_frames"))
    parse_xids(compiled.parse("xids"))
    parse_lookalikes(compiled.parse("lookalikes"))
    parse_settings(compiled.parse("engine_settings"))
    parse_bugs(compiled.parse("known_bugs"))
    parse_bugs(compiled.parse("known_bugs_upstream"), "known_bugs_upstream.yaml", upstream=True)
    compiled.parse(compiled.RUNBOOKS)


def main() -> int:
    try:
        check()
    except ValueError as exc:
        print(f"triage.classes.build: {exc}", file=sys.stderr)
        return 1
    print(compiled.build())
    registry.cache_clear()
    from .runbooks import index

    index.cache_clear()
    for path in schemas.write(registry()):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
