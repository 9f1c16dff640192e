"""The load a proof drives: how many requests at once, how long their prompts and outputs are,
for how long — and the bounds no run may pass, whatever the profile asks.

Each figure carries where it came from (`logs/vllm.log:41`, `--concurrency`, `profile.yaml`,
`default`), because "the fix held under the incident's peak" is only true when the peak figures
came from the incident. A profile file is this tool's own YAML/JSON (`concurrency`,
`prompt_tokens`, `output_tokens`, optional `duration_s`, `ramp_s`) or the result JSON of
`vllm bench serve` (its `max_concurrency`, input and output lengths); `vllm_bench_argv` exports a
profile as the `vllm bench serve` command that replays it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from ..errors import BadInput

PROFILE_KEYS = ("concurrency", "prompt_tokens", "output_tokens", "duration_s", "ramp_s", "model")
DEFAULT_OUTPUT_TOKENS = 128      # vLLM's log never records output lengths
DEFAULT_PROMPT_TOKENS = 512
MAX_FILE_BYTES = 16 << 20


EVIDENCE, FLAG, FILE, DEFAULT = "evidence", "flag", "file", "default"


@dataclass(frozen=True)
class Figure:
    value: int
    source: str                  # where the number came from, for the reader to check
    origin: str = DEFAULT        # EVIDENCE | FLAG | FILE | DEFAULT

    @property
    def from_evidence(self) -> bool:
        return self.origin == EVIDENCE


@dataclass(frozen=True)
class Limits:
    """Every run is bounded: in requests, time and concurrency (the hard ceilings are the
    class constants; a caller may only lower them)."""
    max_requests: int = 20000
    duration_s: float = 300.0                # the hold at full concurrency
    ramp_s: float = 10.0
    request_timeout_s: float = 300.0
    interval_s: float = 0.5                  # /metrics and NVML sampling
    drain_s: float = 30.0                    # in-flight requests may finish this long after the hold

    MAX_CONCURRENCY = 1024
    MAX_REQUESTS = 1_000_000
    MAX_DURATION_S = 3600.0

    def check(self, concurrency: int) -> None:
        if not 1 <= concurrency <= self.MAX_CONCURRENCY:
            raise BadInput("--concurrency", f"{concurrency} is out of range (1 to {self.MAX_CONCURRENCY})")
        if not 1 <= self.max_requests <= self.MAX_REQUESTS:
            raise BadInput("--max-requests", f"{self.max_requests} is out of range (1 to {self.MAX_REQUESTS})")
        if not 0 < self.duration_s <= self.MAX_DURATION_S:
            raise BadInput("--duration", f"{self.duration_s:g} s is out of range (0 to {self.MAX_DURATION_S:g} s)")
        if not 0 <= self.ramp_s <= self.MAX_DURATION_S:
            raise BadInput("--ramp", f"{self.ramp_s:g} s is out of range (0 to {self.MAX_DURATION_S:g} s)")

    @property
    def wall_s(self) -> float:
        """The longest a run can take: ramp, hold, then the in-flight requests' last chance."""
        return self.ramp_s + self.duration_s + min(self.drain_s, self.request_timeout_s)


@dataclass(frozen=True)
class LoadProfile:
    concurrency: Figure
    prompt_tokens: Figure
    output_tokens: Figure
    model: str | None = None
    notes: tuple[str, ...] = ()          # what a reader should know (a figure capped, one missing)

    @property
    def from_incident(self) -> bool:
        """The concurrency and prompt length both came from the evidence: the incident's own peak."""
        return self.concurrency.from_evidence and self.prompt_tokens.from_evidence

    def with_overrides(self, concurrency: int | None = None, prompt_tokens: int | None = None,
                       output_tokens: int | None = None) -> "LoadProfile":
        out = self
        if concurrency is not None:
            out = replace(out, concurrency=Figure(concurrency, "--concurrency", FLAG))
        if prompt_tokens is not None:
            out = replace(out, prompt_tokens=Figure(prompt_tokens, "--prompt-tokens", FLAG))
        if output_tokens is not None:
            out = replace(out, output_tokens=Figure(output_tokens, "--output-tokens", FLAG))
        return out

    def fitted(self, max_model_len: int | None) -> "LoadProfile":
        """Prompt + output within the server's context: a request it must reject proves nothing
        about memory. The cut is said in the notes."""
        if not max_model_len or self.prompt_tokens.value + self.output_tokens.value <= max_model_len:
            return self
        output = min(self.output_tokens.value, max(1, max_model_len // 8))
        prompt = max(1, max_model_len - output)
        note = (f"prompt {self.prompt_tokens.value} + output {self.output_tokens.value} tokens exceed the server's "
                f"max_model_len {max_model_len}: sent as {prompt} + {output}")
        return replace(self, prompt_tokens=replace(self.prompt_tokens, value=prompt),
                       output_tokens=replace(self.output_tokens, value=output), notes=(*self.notes, note))

    def json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency.value, "prompt_tokens": self.prompt_tokens.value,
                "output_tokens": self.output_tokens.value, "model": self.model,
                "from_incident": self.from_incident,
                "sources": {"concurrency": self.concurrency.source, "prompt_tokens": self.prompt_tokens.source,
                            "output_tokens": self.output_tokens.source},
                "origins": {"concurrency": self.concurrency.origin, "prompt_tokens": self.prompt_tokens.origin,
                            "output_tokens": self.output_tokens.origin},
                "notes": list(self.notes)}

    def describe(self) -> str:
        return (f"{self.concurrency.value} concurrent requests of {self.prompt_tokens.value} prompt + "
                f"{self.output_tokens.value} output tokens")


def defaults(model: str | None = None) -> LoadProfile:
    return LoadProfile(Figure(1, "default"), Figure(DEFAULT_PROMPT_TOKENS, "default"),
                       Figure(DEFAULT_OUTPUT_TOKENS, "default"), model)


def read_profile_file(path: str) -> tuple[LoadProfile, dict[str, float]]:
    """(profile, timing keys it sets: duration_s / ramp_s) from a profile file or a `vllm bench
    serve` result JSON. Anything unreadable or out of shape is one BadInput naming the file."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_FILE_BYTES:
            raise BadInput(path, f"larger than {MAX_FILE_BYTES >> 20} MiB: not a load profile")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(path, "no such profile file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(path, f"cannot read the profile: {getattr(exc, 'strerror', None) or exc}") from None
    data = _parse(path, text)
    if not isinstance(data, dict):
        raise BadInput(path, "expected a mapping (concurrency, prompt_tokens, output_tokens) or a vllm bench result")
    if "max_concurrency" in data or "input_lens" in data or "total_input_tokens" in data:
        return _from_vllm_bench(path, data), {}
    unknown = sorted(set(data) - set(PROFILE_KEYS))
    if unknown:
        raise BadInput(path, f"unknown key {unknown[0]!r} (allowed: {', '.join(PROFILE_KEYS)})")
    base = defaults(str(data["model"]) if isinstance(data.get("model"), str) else None)
    figures = {}
    for key in ("concurrency", "prompt_tokens", "output_tokens"):
        if key in data:
            figures[key] = Figure(_positive_int(path, key, data[key]), path, FILE)
    timing = {key: _positive_number(path, key, data[key]) for key in ("duration_s", "ramp_s") if key in data}
    return replace(base, **figures), timing


def _parse(path: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadInput(path, f"neither JSON nor YAML: {str(exc).splitlines()[0]}") from None


def _from_vllm_bench(path: str, data: Mapping[str, Any]) -> LoadProfile:
    """A `vllm bench serve --save-result` file: its concurrency cap and the longest request it sent."""
    src = f"{path} (vllm bench serve result)"
    conc = data.get("max_concurrency")
    if conc is None:
        raise BadInput(path, "a vllm bench serve result without max_concurrency (run it with --max-concurrency)")
    inputs, outputs = data.get("input_lens"), data.get("output_lens")
    if isinstance(inputs, list) and inputs:
        prompt = max(_positive_int(path, "input_lens", v) for v in inputs)
    else:
        completed = _positive_int(path, "completed", data.get("completed"))
        prompt = max(1, int(_positive_number(path, "total_input_tokens", data.get("total_input_tokens")) // completed))
    output = max((_positive_int(path, "output_lens", v) for v in outputs), default=DEFAULT_OUTPUT_TOKENS) \
        if isinstance(outputs, list) and outputs else DEFAULT_OUTPUT_TOKENS
    model = data.get("model_id")
    measured = isinstance(outputs, list) and bool(outputs)
    return LoadProfile(Figure(_positive_int(path, "max_concurrency", conc), src, FILE), Figure(prompt, src, FILE),
                       Figure(output, src, FILE) if measured else Figure(output, "default"),
                       str(model) if isinstance(model, str) else None)


def _positive_int(path: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1 or int(value) != value:
        raise BadInput(path, f"{key}: expected a positive whole number, not {value!r}")
    return int(value)


def _positive_number(path: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise BadInput(path, f"{key}: expected a positive number, not {value!r}")
    return float(value)


def vllm_bench_argv(profile: LoadProfile, url: str, model: str, requests: int) -> list[str]:
    """The `vllm bench serve` command that replays this profile: random token prompts of the
    same lengths, the same concurrency cap, no EOS so every output is full length."""
    return ["vllm", "bench", "serve", "--backend", "vllm", "--base-url", url.rstrip("/"), "--endpoint",
            "/v1/completions", "--model", model, "--dataset-name", "random",
            "--random-input-len", str(profile.prompt_tokens.value),
            "--random-output-len", str(profile.output_tokens.value), "--random-range-ratio", "0",
            "--num-prompts", str(requests), "--max-concurrency", str(profile.concurrency.value),
            "--request-rate", "inf", "--ignore-eos", "--save-result"]


def profile_yaml(profile: LoadProfile, limits: Limits) -> str:
    """The profile as a file `triage prove --profile FILE` reads back."""
    lines = [f"# {profile.describe()}", f"# sources: concurrency {profile.concurrency.source}; "
             f"prompt_tokens {profile.prompt_tokens.source}; output_tokens {profile.output_tokens.source}",
             f"concurrency: {profile.concurrency.value}", f"prompt_tokens: {profile.prompt_tokens.value}",
             f"output_tokens: {profile.output_tokens.value}", f"duration_s: {limits.duration_s:g}",
             f"ramp_s: {limits.ramp_s:g}"]
    if profile.model:
        lines.append(f"model: {json.dumps(profile.model)}")
    return "\n".join(lines) + "\n"
