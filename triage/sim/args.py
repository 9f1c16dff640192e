"""Launch flags, parsed the way `vllm serve` parses them (argparse), plus the simulator's own.

The vLLM flags keep vLLM's names and defaults so that `triage`'s advice (which edits a real
vLLM command line) applies to the simulator unchanged; the `--sim-*`, `--burst-*`,
`--chronic-*`, `--scenario` and `--log` options exist only here and never appear in the vLLM
log lines. The raw argv is kept so a restart can reuse it.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

SCENARIOS = ("healthy", "startup", "burst", "chronic", "prefix_cache", "hang", "ignore_sigterm", "orphan_worker")

NATIVE_CONTEXT = 131072            # the simulated model's own context length (a Llama-3.1-8B)
LONG_CONTEXT = 1048576             # the `startup` scenario's model: a 1M-context checkpoint
DEFAULT_BATCHED_TOKENS = 16384     # 0.11 picks this per GPU class; this is its 80 GB value
VLLM_DEFAULT_PORT = 8000


@dataclass(frozen=True)
class SimArgs:
    model: str
    host: str = "127.0.0.1"
    port: int = 0
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool | None = None     # None: the V1 engine decides (on)
    enforce_eager: bool = False
    api_key: str | None = None                    # accepted and logged as vLLM logs it; not enforced
    hf_token: str | None = None
    ssl_keyfile_password: str | None = None
    scenario: str = "healthy"
    sim_gpu_gib: float = 80.0
    sim_weights_gib: float = 16.0
    sim_kv_bytes_per_token: int = 131072
    burst_concurrency: int = 8
    burst_prompt_tokens: int = 16000
    chronic_leak_mib_per_request: float = 512.0
    sim_hold_gpu_gib: float = 0.0                 # real GPU memory the engine core holds (torch + CUDA)
    log: str | None = None                        # None: stderr
    argv: tuple[str, ...] = field(default=(), compare=False)

    @property
    def model_len(self) -> int:
        """max_model_len as the engine resolves it: the flag, else the model's own context."""
        if self.max_model_len is not None:
            return self.max_model_len
        return LONG_CONTEXT if self.scenario == "startup" else NATIVE_CONTEXT

    @property
    def batched_tokens(self) -> int:
        return self.max_num_batched_tokens or DEFAULT_BATCHED_TOKENS

    @property
    def prefix_caching(self) -> bool:
        return self.enable_prefix_caching is not False

    def command(self) -> list[str]:
        """The argv that starts this simulator again with the same flags."""
        return [sys.executable, "-m", "triage.sim", "serve", *self.argv]


PROG = "python -m triage.sim serve"


class _ClickStyle(argparse.HelpFormatter):
    """Help that reads like every other `triage` command's (click): `Usage:`, `Options:`, short
    metavars and each default shown as `[default: X]`."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=34, width=min(shutil.get_terminal_size().columns, 100))

    def add_usage(self, usage, actions, groups, prefix=None):    # type: ignore[no-untyped-def]
        super().add_usage(usage, actions, groups, prefix="Usage: ")

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        shown = default is not None and default is not False and default is not argparse.SUPPRESS
        if action.option_strings and shown and "default" not in text:
            text += f"  [default: {default}]"
        return text


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """`prog` is how the user invoked it (`triage sim serve` from the CLI), for --help and errors."""
    p = argparse.ArgumentParser(prog=prog, usage="%(prog)s MODEL [OPTIONS]", formatter_class=_ClickStyle,
                                description="Simulate vLLM's OpenAI-compatible server on loopback: real log "
                                            "lines, /health, /v1/models, /v1/completions, /metrics, failing like "
                                            "the --scenario (see triage.sim).")
    p._positionals.title = "Arguments"
    p._optionals.title = "Options"
    p.add_argument("model", metavar="MODEL", help="the model name the server serves and logs")
    vllm = p.add_argument_group("vLLM flags (same names and defaults as vllm serve)")
    vllm.add_argument("--host", default="127.0.0.1", metavar="HOST", help="bind address")
    vllm.add_argument("--port", type=int, default=0, metavar="N", help="0 picks a free port and prints it")
    vllm.add_argument("--max-model-len", type=int, default=None, metavar="N",
                      help="default: the model's own context (131072; 1048576 for --scenario startup)")
    vllm.add_argument("--gpu-memory-utilization", type=float, default=0.9, metavar="F",
                      help="share of the card the engine may use")
    vllm.add_argument("--max-num-seqs", type=int, default=256, metavar="N", help="sequences per step at most")
    vllm.add_argument("--max-num-batched-tokens", type=int, default=None, metavar="N",
                      help=f"tokens per step at most (default: {DEFAULT_BATCHED_TOKENS}, vLLM 0.11's on an 80 GB card)")
    vllm.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                      help="default: on (the V1 engine's choice)")
    vllm.add_argument("--enforce-eager", action="store_true", default=False, help="no CUDA graphs (logged only)")
    # Secrets on the command line, as deployments pass them: logged in `non-default args` the way
    # vLLM logs them (so recovery and every output must mask them); requests are not checked.
    vllm.add_argument("--api-key", default=None, metavar="KEY", help="logged as vLLM logs it; not enforced")
    vllm.add_argument("--hf-token", default=None, metavar="TOKEN", help="logged as vLLM logs it")
    vllm.add_argument("--ssl-keyfile-password", default=None, metavar="PASSWORD", help="logged as vLLM logs it")
    sim = p.add_argument_group("Simulator only")
    sim.add_argument("--scenario", choices=SCENARIOS, default="healthy", metavar="NAME",
                     help=f"how it fails: {', '.join(SCENARIOS)}")
    sim.add_argument("--sim-gpu-gib", type=float, default=80.0, metavar="GIB", help="simulated GPU memory")
    sim.add_argument("--sim-weights-gib", type=float, default=16.0, metavar="GIB", help="simulated model weights")
    sim.add_argument("--sim-kv-bytes-per-token", type=int, default=131072, metavar="BYTES",
                     help="KV-cache bytes per token")
    sim.add_argument("--burst-concurrency", type=int, default=8, metavar="N",
                     help="burst: a step running more requests than this runs out of memory (once the KV "
                          "cache is 90%% full)")
    sim.add_argument("--burst-prompt-tokens", type=int, default=16000, metavar="N",
                     help="burst: a step prefilling more tokens than this runs out of memory")
    sim.add_argument("--chronic-leak-mib-per-request", type=float, default=512.0, metavar="MIB",
                     help="chronic: allocator fragments left behind by each request")
    sim.add_argument("--sim-hold-gpu-gib", type=float, default=0.0, metavar="GIB",
                     help="hold this much real GPU memory in the engine core, as vLLM's does (needs torch "
                          "with CUDA): recovery can then be checked against a real driver and NVML")
    sim.add_argument("--log", default=None, metavar="FILE",
                     help="append the vLLM log here (default: stderr, as a real server's)")
    return p


def parse_args(argv: Sequence[str], prog: str = PROG) -> SimArgs:
    ns = build_parser(prog).parse_args(list(argv))
    values: dict[str, Any] = vars(ns)
    args = SimArgs(**values, argv=tuple(argv))
    _validate(args, prog)
    return args


def _validate(args: SimArgs, prog: str = PROG) -> None:
    problems = []
    if not 0 < args.gpu_memory_utilization <= 1:
        problems.append("--gpu-memory-utilization must be in (0, 1]")
    for name in ("max_num_seqs", "burst_concurrency", "burst_prompt_tokens", "sim_kv_bytes_per_token"):
        if getattr(args, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be at least 1")
    if args.max_model_len is not None and args.max_model_len < 1:
        problems.append("--max-model-len must be at least 1")
    if args.sim_gpu_gib <= 0 or args.sim_weights_gib < 0:
        problems.append("--sim-gpu-gib must be positive and --sim-weights-gib not negative")
    if args.sim_hold_gpu_gib < 0:
        problems.append("--sim-hold-gpu-gib must not be negative")
    if problems:
        build_parser(prog).error("; ".join(problems))


def non_default_args(args: SimArgs) -> dict[str, Any]:
    """What vLLM 0.11 logs as `non-default args`: the vLLM flags that differ from vLLM's defaults.

    vLLM's own defaults are used here (host None, port 8000), so a simulator on loopback shows
    `'host': '127.0.0.1'` the way a real launch with --host does."""
    out: dict[str, Any] = {"model_tag": args.model, "host": args.host}
    if args.port != VLLM_DEFAULT_PORT:
        out["port"] = args.port
    out["model"] = args.model
    if args.max_model_len is not None:
        out["max_model_len"] = args.max_model_len
    if args.enforce_eager:
        out["enforce_eager"] = True
    if args.gpu_memory_utilization != 0.9:
        out["gpu_memory_utilization"] = args.gpu_memory_utilization
    if args.enable_prefix_caching is not None:
        out["enable_prefix_caching"] = args.enable_prefix_caching
    if args.max_num_batched_tokens is not None:
        out["max_num_batched_tokens"] = args.max_num_batched_tokens
    if args.max_num_seqs != 256:
        out["max_num_seqs"] = args.max_num_seqs
    for name in ("api_key", "hf_token", "ssl_keyfile_password"):
        if getattr(args, name) is not None:
            out[name] = getattr(args, name)
    return out
