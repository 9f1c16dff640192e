"""`triage plan`: will this model, with these flags, run out of memory on this GPU?"""
from __future__ import annotations

import sys

import click

from ..errors import ExitCode

_DTYPES = ["auto", "bfloat16", "float16", "half", "float32", "float"]


def _size(ctx: click.Context, param: click.Parameter, value: str | None) -> int:
    from ..units import parse_size

    if value is None:
        return 0
    size = parse_size(value)
    if size is None:
        raise click.BadParameter(f"{value!r} is not a size (bytes, or e.g. 48GiB)")
    return size


@click.command()
@click.option("--model", "model", required=True, metavar="CONFIG.json|MODEL_DIR",
              help="The model's Hugging Face config.json, or the folder holding it (and model.safetensors.index.json).")
@click.option("--gpu", "gpu_text", required=True, metavar="NAME|BYTES",
              help="A GPU by name (A100-80GB, H100, H200, L4, L40S, ...), a card class (80GB: the smallest card sold "
                   "as 80 GB, with a note) or the card's total as CUDA reports it (85899345920, 79.18GiB).")
@click.option("--tp", "--tensor-parallel-size", "tp", type=click.IntRange(1, 1024), default=1, show_default=True,
              help="Tensor-parallel GPUs.")
@click.option("--pp", "--pipeline-parallel-size", "pp", type=click.IntRange(1, 1024), default=1, show_default=True,
              help="Pipeline-parallel stages.")
@click.option("--dtype", type=click.Choice(_DTYPES, case_sensitive=False), help="Weights dtype (default: auto).")
@click.option("--kv-cache-dtype", metavar="DTYPE", help="KV-cache dtype: auto (the model's), fp8, fp8_e4m3, fp8_e5m2.")
@click.option("--quantization", metavar="METHOD", help="Quantisation of an unquantised checkpoint (fp8, awq, gptq, ...).")
@click.option("--max-model-len", type=click.IntRange(1, 1 << 26), help="Longest sequence (default: the model's).")
@click.option("--allow-long-max-model-len", "allow_long", is_flag=True,
              help="As VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: accept a --max-model-len past the model's maximum.")
@click.option("--max-num-seqs", type=click.IntRange(1, 1 << 20), help="Sequences at once (default: the engine's).")
@click.option("--max-num-batched-tokens", type=click.IntRange(1, 1 << 26), help="Tokens in one forward pass.")
@click.option("--gpu-memory-utilization", "util", type=click.FloatRange(0, 1, min_open=True),
              help="Share of the card the engine takes (SGLang: --mem-fraction-static).")
@click.option("--other-tenants-bytes", "tenants", callback=_size, metavar="BYTES",
              help="Memory other processes hold on each GPU (bytes, or e.g. 4GiB).")
@click.option("--engine", type=click.Choice(["vllm", "sglang"]), default="vllm", show_default=True)
@click.option("--engine-version", metavar="VERSION",
              help="Size as this engine version does: the newest release at or below it that the plan has read "
                   "(default: the newest it has read; the output names the release).")
@click.option("--enforce-eager", is_flag=True, help="No CUDA graphs (vLLM --enforce-eager, SGLang --disable-cuda-graph).")
@click.option("--flashinfer-sampler", is_flag=True,
              help="The engine samples with FlashInfer (its log says 'Using FlashInfer for top-p & top-k sampling'; "
                   "vLLM's Docker images ship FlashInfer): the profile's sampler then sorts nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the triage.plan/v1 JSON object.")
def plan(model: str, gpu_text: str, tp: int, pp: int, dtype: str | None, kv_cache_dtype: str | None,
         quantization: str | None, max_model_len: int | None, max_num_seqs: int | None,
         max_num_batched_tokens: int | None, allow_long: bool, util: float | None, tenants: int, engine: str,
         engine_version: str | None, enforce_eager: bool, flashinfer_sampler: bool, as_json: bool) -> None:
    """Will MODEL with these flags fit GPU? The weights, KV cache and start-up arithmetic from the
    model's config.json, a verdict (fits, tight, will fail at start-up, will fail under a burst),
    safe flags with a ready command line, and the same flags on every GPU of the table.

    Exit codes: 0 fits or tight, 4 will fail, 1 bad input (an unreadable config), 2 usage error."""
    from ..errors import TriageError
    from ..memory.config import load
    from .engines import sizing
    from .gpus import resolve
    from .plan import FAILS_BURST, FAILS_STARTUP, Request, make_plan

    try:
        gpu = resolve(gpu_text)
    except TriageError as exc:
        raise click.BadParameter(str(exc).removeprefix(f"--gpu {gpu_text!r}: "), param_hint="--gpu") from None
    shape = load(model)
    req = Request(tp=tp, pp=pp, dtype=dtype.lower() if dtype else None, kv_cache_dtype=kv_cache_dtype,
                  quantization=quantization, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                  max_num_batched_tokens=max_num_batched_tokens, util=util, tenants=tenants,
                  enforce_eager=enforce_eager, allow_long=allow_long, flashinfer_sampler=flashinfer_sampler)
    try:
        engine_sizing = sizing(engine, engine_version)
    except TriageError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[-1], param_hint="--engine-version") from None
    result = make_plan(shape, gpu, req, engine_sizing, model)
    if as_json:
        from ..output import echo_json
        from .render import to_json

        echo_json(to_json(result), indent=2, ensure_ascii=False)
    else:
        from ..output import wrap_plain
        from .render import TABLE_ROW, text_lines

        for line in text_lines(result):
            if line.startswith(TABLE_ROW):
                click.echo(line[len(TABLE_ROW):])
                continue
            indent = len(line) - len(line.lstrip(" -")) if line.startswith("  ") else 2
            click.echo(wrap_plain(line, indent=indent + 2) if line else "")
    fails = result.outcome.verdict in (FAILS_STARTUP, FAILS_BURST)
    sys.exit(int(ExitCode.WILL_FAIL if fails else ExitCode.OK))
