"""`python -m triage.sim serve MODEL [flags]`: run the simulated vLLM server."""
from __future__ import annotations

import sys

USAGE = "usage: python -m triage.sim serve MODEL [vLLM flags] [--scenario NAME] (serve --help for the flags)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "serve":
        print(USAGE, file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    from .server import serve   # imported late: `--help` and usage errors stay fast

    return serve(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
