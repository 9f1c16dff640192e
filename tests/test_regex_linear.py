"""Every regular expression in the package runs in time linear in the length of its input.

One hostile line used to cost seconds to hours (the child-killed signature backtracked cubically
on a run of word characters, the key=value pair reader quadratically on an `args: Namespace(`
line). Here every pattern the package holds is collected — module-level patterns, patterns kept
in containers and dataclasses, the signature data file, and every regex literal in the source —
and fed adversarial lines built from its own pieces: each repeated element pumped thousands of
times, with and without what must follow it. Time must grow linearly: four times the line may
cost about four times as much (a quadratic pattern costs sixteen). Only timings taken in the same
run are compared, climbing from small sizes (a pattern that explodes fails where that costs
milliseconds); how fast the code is in absolute terms is for benchmarks/, not for a test on a
loaded machine. The library entry points and the CLI get the known hostile lines end to end.
"""
from __future__ import annotations

import ast
import base64
import dataclasses
import gc
import importlib
import pkgutil
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

try:                                   # Python 3.11+
    import re._constants as sre_c
    import re._parser as sre_p
except ImportError:                    # Python 3.10
    import sre_constants as sre_c      # type: ignore[no-redef]
    import sre_parse as sre_p          # type: ignore[no-redef]

import triage

PACKAGE = Path(triage.__file__).resolve().parent
SIZE = 8 * 1024                        # lines of SIZE and 4 x SIZE: 4x longer may cost ~4x, not 16x
MAX_RATIO = 8.0                        # linear ~4, quadratic ~16: the middle leaves room for noise
NOISE_FLOOR_S = 0.0005                 # below this, noise dominates a ratio and the cost is harmless
CLI_RATIO = 5.0                        # a hostile line may cost the CLI this many times a plain line of its length


# --- collecting the patterns -------------------------------------------------------------------

@dataclass(frozen=True)
class Found:
    origin: str
    pattern: re.Pattern[Any]


def _repeats(parsed: Any) -> bool:
    """True when the pattern repeats something without a small bound (only repeats can backtrack)."""
    for op, av in parsed:
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT) and (av[1] == sre_c.MAXREPEAT or av[1] > 1):
            return True
        children = _children(op, av)
        if any(_repeats(c) for c in children):
            return True
    return False


def _children(op: Any, av: Any) -> list[Any]:
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
        return [av[2]]
    if op is sre_c.SUBPATTERN:
        return [av[-1]]
    if op is sre_c.BRANCH:
        return list(av[1])
    if op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
        return [av[1]]
    if op is sre_c.GROUPREF_EXISTS:
        return [x for x in av[1:] if x is not None]
    return []


def _visit(value: Any, origin: str, out: dict[tuple[Any, int], Found], depth: int = 0) -> None:
    if depth > 4:
        return
    if isinstance(value, re.Pattern):
        out.setdefault((value.pattern, value.flags), Found(origin, value))
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            _visit(item, origin, out, depth + 1)
    elif isinstance(value, dict):
        for item in value.values():
            _visit(item, origin, out, depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _visit(getattr(value, f.name, None), origin, out, depth + 1)
        if isinstance(getattr(type(value), "pattern", None), property):   # a signature compiles on demand
            _visit(value.pattern, origin, out, depth + 1)


def _literal(node: ast.AST) -> str | None:
    """The text of a string expression; formatted or computed parts become a plain word."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = [_literal(v) if isinstance(v, ast.Constant) else "x" for v in node.values]
        return "".join(p or "" for p in parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(node.left), _literal(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else "x") + (right if right is not None else "x")
    return None


_RE_CALLS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"}


def _source_literals() -> Iterator[tuple[str, str]]:
    """Strings in the package source that may be patterns: every plain string constant (docstrings
    aside; `_compiles` keeps those with a repeat), and every built string (f-string, `+`) handed
    to a `re` function (its computed parts become a plain word)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)}
        inside: set[int] = set()             # parts of a built string: not patterns on their own
        for node in ast.walk(tree):
            if isinstance(node, (ast.JoinedStr, ast.BinOp)):
                inside.update(id(c) for c in ast.walk(node) if c is not node)
        for node in ast.walk(tree):
            where = f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) not in docstrings and id(node) not in inside:
                    yield where, node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re" \
                    and node.func.attr in _RE_CALLS and isinstance(node.args[0], (ast.JoinedStr, ast.BinOp)):
                text = _literal(node.args[0])
                if text:
                    yield where, text


def _compiles(text: str) -> re.Pattern[str] | None:
    import warnings

    try:
        with warnings.catch_warnings():
            # Any string literal is tried: one such as "[[...]]" is no regex, and the parser says so.
            warnings.simplefilter("ignore", FutureWarning)
            parsed = sre_p.parse(text)
    except (re.error, RecursionError, OverflowError, ValueError):
        return None
    return re.compile(text) if _repeats(parsed) else None


def all_patterns() -> list[Found]:
    found: dict[tuple[Any, int], Found] = {}
    try:
        from triage.evidence import sigdata
    except ImportError:
        sigdata = None
    if sigdata is not None:              # first: the signatures are built from these entries
        for entry in sigdata.entries():
            pat = re.compile(entry.pattern)
            found.setdefault((pat.pattern, pat.flags), Found(f"signatures.yaml:{entry.id}", pat))
    for info in pkgutil.walk_packages(triage.__path__, "triage."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            _visit(value, f"{info.name}.{name}", found)
    for origin, text in _source_literals():
        pat = _compiles(text)
        if pat is not None:
            found.setdefault((pat.pattern, pat.flags), Found(origin, pat))
    return sorted(found.values(), key=lambda f: f.origin)


PATTERNS = all_patterns()


# --- adversarial lines from a pattern's own pieces -----------------------------------------------

_CANDIDATES = list("aA0_.-:/+=,;'\"()[]{}|#@\\ \tx")


def _in_class(ch: str, items: list[Any]) -> bool:
    negate = bool(items) and items[0][0] is sre_c.NEGATE
    word = ch.isalnum() or ch == "_"
    hit = False
    for op, av in items:
        if op is sre_c.LITERAL:
            hit |= av == ord(ch)
        elif op is sre_c.RANGE:
            hit |= av[0] <= ord(ch) <= av[1]
        elif op is sre_c.CATEGORY:
            hit |= {sre_c.CATEGORY_DIGIT: ch.isdigit(), sre_c.CATEGORY_NOT_DIGIT: not ch.isdigit(),
                    sre_c.CATEGORY_SPACE: ch.isspace(), sre_c.CATEGORY_NOT_SPACE: not ch.isspace(),
                    sre_c.CATEGORY_WORD: word, sre_c.CATEGORY_NOT_WORD: not word}.get(av, False)
    return hit != negate


def _class_chars(items: list[Any], k: int = 4) -> list[str]:
    own = [chr(av) for op, av in items if op is sre_c.LITERAL] + [chr(av[0]) for op, av in items if op is sre_c.RANGE]
    chars = [c for c in dict.fromkeys(own + _CANDIDATES) if _in_class(c, items)]
    return chars[:k] or ["a"]


def _sample(seq: Any) -> str:
    """A short string the sequence matches (or nearly: assertions are ignored)."""
    out = []
    for op, av in seq:
        if op is sre_c.LITERAL:
            out.append(chr(av))
        elif op is sre_c.NOT_LITERAL:
            out.append("b" if av == ord("a") else "a")
        elif op is sre_c.ANY:
            out.append("a")
        elif op is sre_c.IN:
            out.append(_class_chars(av, 1)[0])
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            out.append(_sample(av[2]) * min(av[0], 4))
        elif op is sre_c.SUBPATTERN:
            out.append(_sample(av[-1]))
        elif op is sre_c.BRANCH:
            out.append(_sample(av[1][0]))
    return "".join(out)


def _units(body: Any) -> list[str]:
    """What to repeat for a repeated body: a few members of a class, or a sample of the body."""
    if len(body) == 1:
        op, av = body[0]
        if op is sre_c.IN:
            return _class_chars(av)
        if op in (sre_c.ANY, sre_c.NOT_LITERAL):
            return ["a", " ", "=", "("]
        if op is sre_c.SUBPATTERN:
            return _units(av[-1])
        if op is sre_c.BRANCH:
            return [u for alt in av[1] for u in _units(alt)[:2]]
    s = _sample(body)
    return [s] if s else []


def _pumps(seq: Any, before: str = "", after: str = "", depth: int = 0) -> Iterator[tuple[str, str, str]]:
    """(text before, unit to repeat, text after) for every unbounded repeat in the pattern."""
    if depth > 12:
        return
    for i, (op, av) in enumerate(seq):
        pre, post = before + _sample(seq[:i]), _sample(seq[i + 1:]) + after
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            if av[1] == sre_c.MAXREPEAT or av[1] > 16:
                for unit in _units(av[2]):
                    yield pre, unit, post
        for child in _children(op, av):
            yield from _pumps(child, pre, post, depth + 1)


_GENERIC = ["a", " ", "=", "a=", "a ", "-", "0", "0.", "a.", "'", "(", "a,", ": ", "a:", "/", "\t", "{", "a-", "x=1, "]


def hostile_lines(pattern: re.Pattern[Any], n: int) -> dict[tuple, str]:
    """Adversarial lines of about n characters, keyed so the same recipe can be rebuilt at any n."""
    text = pattern.pattern if isinstance(pattern.pattern, str) else pattern.pattern.decode("latin-1")
    seq = sre_p.parse(text, pattern.flags & ~re.UNICODE if isinstance(pattern.pattern, bytes) else pattern.flags)
    lines: dict[tuple, str] = {}
    for k, (pre, unit, post) in enumerate(_pumps(seq)):
        body = unit * max(1, n // len(unit))
        for j, line in enumerate((pre + body, pre + body + post, pre + body + post[:-1], pre + body + "!",
                                  body + post, pre + body + "\n" + post, (pre + unit) * (n // len(pre + unit)),
                                  (pre + " ") * (n // (len(pre) + 1)))):
            lines[("pump", k, j)] = line
    whole = _sample(seq) or "a"
    rnd = random.Random(7)
    b64 = base64.urlsafe_b64encode(rnd.randbytes(n * 3 // 4)).decode()
    for g in _GENERIC + ["b64"]:
        body = b64 if g == "b64" else g * (n // len(g))
        for j, line in enumerate((body, whole + body, body + whole[:-1], whole * (n // len(whole)))):
            lines[(g, j)] = line
    return lines


def _timed(run: Callable[[Any], Any], arg: Any) -> float:
    start = time.perf_counter()
    run(arg)
    return time.perf_counter() - start


def _costs(run: Callable[[Any], Any], small: Any, large: Any, runs: int = 3) -> tuple[float, float]:
    """Best-of-runs seconds for both inputs, measured alternately so that a burst of machine load
    hits both sizes alike (the minimum is what the code costs: load only ever adds)."""
    best_small = best_large = float("inf")
    gc.disable()
    try:
        for _ in range(runs):
            best_small = min(best_small, _timed(run, small))
            best_large = min(best_large, _timed(run, large))
    finally:
        gc.enable()
    return best_small, best_large


def assert_linear(label: str, run: Callable[[Any], Any], build: Callable[[int], Any], n: int = SIZE) -> None:
    """run(build(4m)) costs about 4x run(build(m)) at each step m = n/16, n/4, n: sizes climb from
    small ones, so a pattern that explodes fails before its cost does."""
    sizes = [max(64, n // 16), max(64, n // 4), n, 4 * n]
    for small_n, large_n in zip(sizes, sizes[1:]):
        small, large = build(small_n), build(large_n)
        t_small, t_large = _costs(run, small, large)
        if t_large < NOISE_FLOOR_S or t_large < MAX_RATIO * t_small:
            continue
        huge = build(4 * large_n)    # confirm one size up, three times: noise does not grow 16x every time
        for _ in range(3):
            t_large, t_huge = _costs(run, large, huge, runs=5)
            if t_huge < MAX_RATIO * t_large:
                break
        else:
            pytest.fail(f"{label}: grows super-linearly: {t_small * 1000:.2f} / {t_large * 1000:.2f} / "
                        f"{t_huge * 1000:.2f} ms at {len(small) // 1024} / {len(large) // 1024} / "
                        f"{len(huge) // 1024} KiB")


def _consume(pattern: re.Pattern[Any]) -> Callable[[Any], None]:
    def run(data: Any) -> None:
        for _m in pattern.finditer(data):
            pass
    return run


def _data(pattern: re.Pattern[Any], line: str) -> Any:
    return line.encode("latin-1", "replace") if isinstance(pattern.pattern, bytes) else line


def test_the_collection_sees_the_patterns_that_matter():
    """Signatures, the log-line prefixes, the pair readers and the data-file entries are all in."""
    origins = " ".join(f.origin for f in PATTERNS)
    for where in ("logline._VLLM_PREFIX", "torch_oom", "nvidia_smi", "_KV_PAIR",
                  "_STATS_PART", "signatures.yaml:", "redact"):
        assert where in origins, where
    assert len(PATTERNS) > 150


@pytest.mark.parametrize("found", PATTERNS, ids=[f.origin for f in PATTERNS])
def test_pattern_is_linear_on_hostile_lines(found: Found):
    pattern, run = found.pattern, _consume(found.pattern)
    small, large = hostile_lines(pattern, 512), hostile_lines(pattern, 2048)
    costs = []
    for key, line in large.items():       # every recipe at two small sizes: a cubic pattern fails here
        t_small, t_large = _costs(run, _data(pattern, small[key]), _data(pattern, line), runs=1)
        if t_large >= NOISE_FLOOR_S and t_large >= 2 * MAX_RATIO * t_small:
            t_small, t_large = _costs(run, _data(pattern, small[key]), _data(pattern, line), runs=3)
            if t_large >= NOISE_FLOOR_S and t_large >= 2 * MAX_RATIO * t_small:
                # Sub-millisecond ratios are noise-prone on a loaded machine: the growth is confirmed
                # (or not) one size up and again, as assert_linear does, before the pattern fails.
                assert_linear(f"{found.origin} {key}", run,
                              lambda n, key=key: _data(pattern, hostile_lines(pattern, n)[key]), n=2048)
        costs.append((t_large, key))
    for _, key in sorted(costs, reverse=True)[:3]:           # the recipes this pattern finds hardest
        assert_linear(f"{found.origin} {key}", run, lambda n, key=key: _data(pattern, hostile_lines(pattern, n)[key]))


# --- the entry points, end to end ----------------------------------------------------------------

def _hostile_bodies(n: int) -> dict[str, str]:
    """Long runs of the characters the line readers care about."""
    rnd = random.Random(11)
    return {
        "word": "a" * n, "spaces": " " * n, "words": "a " * (n // 2), "pairs": "a=" * (n // 2),
        "digits": "0" * n, "dotted": "0." * (n // 2), "dashes": "-9" * (n // 2), "parens": "a=(" * (n // 3),
        "base64": base64.urlsafe_b64encode(rnd.randbytes(n * 3 // 4)).decode(),
    }


def _examples() -> list[tuple[str, str]]:
    """(entry id, example line) for the data-file entries whose fields a Python extractor reads (the
    field tables only convert a group; every pattern alone is covered above)."""
    try:
        from triage.evidence import sigdata
    except ImportError:
        return []
    out = []
    for item in sigdata.load_raw():
        if not item.get("extract"):
            continue
        example = item["examples"][0]
        out.append((item["id"], example["line"] if isinstance(example, dict) else example))
    return out


EXAMPLES = _examples()


@pytest.mark.parametrize("entry, example", EXAMPLES, ids=[e for e, _ in EXAMPLES])
def test_every_python_extractor_stays_linear(entry: str, example: str):
    """A matching line with a long hostile run inside it: the pattern and the fields it yields."""
    from triage.evidence.signatures import match_message

    middle = len(example) // 2
    for name in ("words", "pairs", "dotted", "base64"):     # the patterns alone get every shape above
        def build(n: int, name: str = name) -> str:
            body = _hostile_bodies(n)[name]
            return example[:middle] + body + example[middle:] + " " + body
        assert_linear(f"{entry} + {name}", match_message, build, n=4 * 1024)


@pytest.mark.parametrize("name", list(_hostile_bodies(16)))
def test_line_readers_stay_linear(name: str):
    """The logger-prefix peeler, every signature at once, the config-pair reader, the torch OOM reader."""
    from triage.evidence.logline import parse_line
    from triage.evidence.signatures import match_message, parse_config_pairs
    from triage.evidence.torch_oom import parse_torch_oom
    from triage.timeref import TimeReference

    times = TimeReference(datetime(2026, 3, 20, tzinfo=timezone.utc), "test")

    def body(n: int) -> str:
        return _hostile_bodies(n)[name]

    assert_linear(f"parse_line {name}", lambda s: parse_line(s, times),
                  lambda n: "(EngineCore_DP0 pid=1) ERROR 03-12 14:17:03 [core.py:1] " + body(n))
    assert_linear(f"match_message {name}", match_message, lambda n: body(n) + " died (exit code: -9)")
    assert_linear(f"parse_config_pairs {name}", parse_config_pairs, body)
    assert_linear(f"Namespace line {name}", match_message, lambda n: "args: Namespace(" + body(n) + ")")
    assert_linear(f"parse_torch_oom {name}", parse_torch_oom,
                  lambda n: "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 " + body(n) + " 1.5 GiB free")


def _redactors() -> list[tuple[str, Callable[[Any], Any]]]:
    from triage import redact as module

    return [("redact", module.redact), ("redact_output", module.redact_output)]


_SECRETISH = ["--api-key ", "a=", "Bearer ", "https://u:", "eyJhbGciOi.", "sk-", "AKIA", "prompt: '", '"content": "',
              "Authorization: ", "-----BEGIN PRIVATE KEY-----", "hf_", "token=", "a", " ", "x-", "'"]


@pytest.mark.parametrize("piece", _SECRETISH)
def test_masking_stays_linear(piece: str):
    for label, fn in _redactors():
        assert_linear(f"{label} {piece!r}", fn, lambda n: piece * (n // len(piece)))


# --- the CLI on the lines that used to take seconds to hours ------------------------------------

_PREFIX = "ERROR 03-12 14:17:03 [core.py:1] "


def _cli_lines() -> dict[str, str]:
    rnd = random.Random(7)
    return {
        # the child-killed signature backtracked cubically on a run of word characters
        "child-killed": _PREFIX + "a" * 2000 + " -9",
        # the key=value pair reader was quadratic on an engine-config line
        "key=value": "INFO 03-12 14:17:03 [llm_engine.py:1] Initializing an LLM engine (v0.6.3) with config: "
                     "model='m', " + "a" * 200_000,
        # 16 KB of base64 ending in " -9" (26 s), and of URL-safe base64, whose '-' and '_' make the
        # whole line one run for the child-killed name (hours)
        "base64": _PREFIX + base64.b64encode(rnd.randbytes(12_000)).decode() + " -9",
        "base64-urlsafe": _PREFIX + base64.urlsafe_b64encode(rnd.randbytes(12_000)).decode(),
        "namespace": "INFO 03-12 14:17:03 [api_server.py:1] args: Namespace(" + "a" * 200_000 + ")",
    }


def _cli_seconds(path: Path, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "triage", "classify", *args, str(path)], capture_output=True,
                              text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{path.name}: still classifying after 120 s")
    return time.perf_counter() - start, proc


def _plain_twin(tmp_path: Path, text: str) -> Path:
    """A log of the same length whose line holds nothing to backtrack on: what the CLI costs anyway."""
    plain = tmp_path / "plain.txt"
    plain.write_text("\n".join("INFO 03-12 14:17:03 [core.py:1] " + "ok " * (len(line) // 3)
                               for line in text.splitlines()) + "\n", encoding="utf-8")
    return plain


@pytest.mark.parametrize("name", list(_cli_lines()))
def test_cli_classifies_hostile_lines_quickly(tmp_path: Path, name: str):
    log = tmp_path / "x.log"
    log.write_text(_cli_lines()[name] + "\n", encoding="utf-8")
    plain = _plain_twin(tmp_path, _cli_lines()[name])
    took_plain, _ = _cli_seconds(plain)
    took, proc = _cli_seconds(log)
    assert proc.returncode in (0, 3), proc.stderr           # a verdict (3: unknown), not an error
    if took > CLI_RATIO * took_plain:                         # once more, both: a burst of load is no regression
        took_plain, _ = _cli_seconds(plain)
        took, _ = _cli_seconds(log)
    assert took <= CLI_RATIO * took_plain, f"{name}: {took:.2f} s against {took_plain:.2f} s for a plain line"


_SMI_TABLE = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |
|=========================================+========================+======================|
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:00:06.0 Off |                    0 |
| N/A   35C    P0             77W /  700W |    4715MiB /  81559MiB |      0%      Default |
+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|=========================================================================================|
"""


def test_cli_reads_a_padded_nvidia_smi_process_row_quickly(tmp_path: Path):
    """The process-row reader backtracked cubically on a row padded with blanks (2,000: ~30 s)."""
    table = tmp_path / "nvidia-smi.txt"
    table.write_text(_SMI_TABLE + "|    0   N/A  N/A             863      C" + " " * 2000 + "x\n", encoding="utf-8")
    plain = tmp_path / "nvidia-smi-plain.txt"
    plain.write_text(_SMI_TABLE + "|    0   N/A  N/A             863      C   python" + " " * 20 + "4000MiB |\n",
                     encoding="utf-8")
    took_plain, _ = _cli_seconds(plain, "--explain")
    took, proc = _cli_seconds(table, "--explain")
    assert proc.returncode in (0, 3), proc.stderr
    assert "NVIDIA H100" in proc.stdout                      # read as an nvidia-smi table, not skipped
    if took > CLI_RATIO * took_plain:
        took_plain, _ = _cli_seconds(plain, "--explain")
        took, _ = _cli_seconds(table, "--explain")
    assert took <= CLI_RATIO * took_plain, f"{took:.2f} s against {took_plain:.2f} s for a plain table"
