"""prometheus-client's exposition-text parser, without the cost of the package's `__init__`.

`import prometheus_client.parser` runs `prometheus_client/__init__.py` first, which imports the
exposition server (http.server, email, ssl): about 40 ms of a `triage classify` start-up of
~0.2 s, for a parser that needs none of it (parser.py imports only its siblings metrics_core,
samples and validation). So the parser is loaded from the installed package's own files under a
private package name that runs no `__init__`; its classes are then distinct from the public
package's, which only the reading here sees (it takes names, labels and values out of them).

Where the public package is already imported (serve, watch, the tests), or the private load fails
(a prometheus-client whose parser reaches into its `__init__`), the public parser is used.
"""
from __future__ import annotations

import sys
from typing import Callable, Iterable

PRIVATE_PACKAGE = "_triage_prometheus_text"


def text_string_to_metric_families() -> Callable[[str], Iterable]:
    """prometheus_client.parser.text_string_to_metric_families, loaded as cheaply as it can be."""
    if "prometheus_client" not in sys.modules:
        loaded = _private_parser()
        if loaded is not None:
            return loaded
    from prometheus_client.parser import text_string_to_metric_families as public

    return public


def _private_parser() -> Callable[[str], Iterable] | None:
    module = sys.modules.get(PRIVATE_PACKAGE + ".parser")
    if module is None:
        import importlib
        import importlib.util
        import types

        try:
            spec = importlib.util.find_spec("prometheus_client")    # finds it; runs nothing
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        package = types.ModuleType(PRIVATE_PACKAGE)
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules[PRIVATE_PACKAGE] = package
        try:
            module = importlib.import_module(PRIVATE_PACKAGE + ".parser")
        except Exception:   # noqa: BLE001 - any failure of the shortcut: the public import decides
            for name in [n for n in sys.modules if n == PRIVATE_PACKAGE or n.startswith(PRIVATE_PACKAGE + ".")]:
                del sys.modules[name]
            return None
    return getattr(module, "text_string_to_metric_families", None)
