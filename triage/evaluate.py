"""Score the classifier on a labelled corpus, exactly the way `triage classify DIR` sees a case.

A case is a YAML file with `label`, `sufficient`, `log` and optional `metrics`. Each is written
to a fresh folder as `server.log` (+ `metrics.txt`) and classified through the same library
call as the CLI. A case marked `sufficient: 'no'` may also be answered `unknown`; the exact-accuracy
figure is taken over in-scope (`scope: in`), log-sufficient cases, overall and per engine family.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .classes import registry
from .classes.base import Branch
from .errors import BadInput, TriageError
from .thresholds import CONFIDENT

CLASSES = registry().ids()
GPU_CLASSES = frozenset(registry().gpu_oom_ids())
NOT_GPU = registry().only(Branch.NOT_GPU).SPEC.id.value     # the look-alikes: host OOM, faults, NCCL
HEALTHY = registry().healthy.id.value
UNDECIDED = registry().fallback.id.value                   # "unknown": an allowed answer where insufficient
ENGINE_TABLE_MIN = 5         # engine families with fewer scored cases are listed but not held to a target
# Confidence bins of the reliability table (the classifier names a class from 0.4 up).
RELIABILITY_BINS = ((0.0, 0.5), (0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.0))


@dataclass
class CaseResult:
    name: str
    label: str
    sufficient: bool
    answer: str
    confidence: float
    error: str | None = None
    engine: str = "unknown"
    in_scope: bool = True

    @property
    def scored(self) -> bool:
        """In scope and decidable from the log: the cases the exact-accuracy target is about."""
        return self.in_scope and self.sufficient

    @property
    def confident_wrong(self) -> bool:
        return not self.acceptable and self.answer not in (UNDECIDED, "error") and self.confidence >= CONFIDENT

    @property
    def false_alarm(self) -> bool:
        """A healthy log given a failure class."""
        return self.label == HEALTHY and self.answer not in (HEALTHY, UNDECIDED)

    @property
    def correct(self) -> bool:
        return self.answer == self.label

    @property
    def acceptable(self) -> bool:
        return self.correct or (not self.sufficient and self.answer == UNDECIDED)

    @property
    def misroute(self) -> bool:
        return (self.label == NOT_GPU and self.answer in GPU_CLASSES) or \
               (self.label in GPU_CLASSES and self.answer == NOT_GPU)


@dataclass
class EvalReport:
    cases: list[CaseResult] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.cases)

    @property
    def accuracy(self) -> float | None:
        return sum(c.correct for c in self.cases) / self.total if self.total else None

    @property
    def acceptable_rate(self) -> float | None:
        return sum(c.acceptable for c in self.cases) / self.total if self.total else None

    @property
    def misroutes(self) -> int:
        return sum(c.misroute for c in self.cases)

    @property
    def wrong(self) -> int:
        """Confident wrong answers: a wrong class at confidence >= CONFIDENT."""
        return sum(c.confident_wrong for c in self.cases)

    @property
    def wrong_any(self) -> int:
        """Wrong classes at any confidence (unknown is not counted)."""
        return sum(1 for c in self.cases if not c.acceptable and c.answer != UNDECIDED)

    @property
    def false_alarms(self) -> int:
        return sum(c.false_alarm for c in self.cases)

    @property
    def scored(self) -> list[CaseResult]:
        return [c for c in self.cases if c.scored]

    @property
    def scored_accuracy(self) -> float | None:
        scored = self.scored
        return sum(c.correct for c in scored) / len(scored) if scored else None

    def per_engine(self) -> dict[str, dict[str, Any]]:
        """Exact accuracy on in-scope, log-sufficient cases per engine family."""
        out: dict[str, dict[str, Any]] = {}
        for engine in sorted({c.engine for c in self.cases}):
            mine = [c for c in self.cases if c.engine == engine]
            scored = [c for c in mine if c.scored]
            out[engine] = {"cases": len(mine), "scored": len(scored),
                           "exact": sum(c.correct for c in scored) / len(scored) if scored else None,
                           "acceptable": sum(c.acceptable for c in mine) / len(mine),
                           "held_to_target": len(scored) >= ENGINE_TABLE_MIN}
        return out

    def per_class(self) -> dict[str, dict[str, Any]]:
        out = {}
        for cls in CLASSES:
            tp = sum(1 for c in self.cases if c.answer == cls and c.label == cls)
            predicted = sum(1 for c in self.cases if c.answer == cls)
            actual = sum(1 for c in self.cases if c.label == cls)
            if not predicted and not actual:
                continue
            out[cls] = {"support": actual, "predicted": predicted,
                        "precision": tp / predicted if predicted else None,
                        "recall": tp / actual if actual else None}
        return out

    def reliability(self) -> list[dict[str, Any]]:
        """How often a named class was right, by confidence bin: a verdict at 0.8 should be right
        about 80% of the time. Over the cases the tool named a class for (not `unknown`, not an
        error), whatever their sufficiency: a named class is a claim either way."""
        named = [c for c in self.cases if c.answer not in (UNDECIDED, "error")]
        out = []
        for low, high in RELIABILITY_BINS:
            mine = [c for c in named if low <= c.confidence < high or (high == 1.0 and c.confidence == 1.0)]
            right = sum(c.correct for c in mine)
            out.append({"bin": f"{low:.1f}-{high:.1f}", "low": low, "high": high, "n": len(mine), "right": right,
                        "right_share": right / len(mine) if mine else None,
                        "mean_confidence": sum(c.confidence for c in mine) / len(mine) if mine else None})
        return out

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "accuracy": self.accuracy, "acceptable": self.acceptable_rate,
                "reliability": self.reliability(),
                "scored": len(self.scored), "scored_accuracy": self.scored_accuracy,
                "misroutes": self.misroutes, "confident_wrong": self.wrong, "wrong_any_confidence": self.wrong_any,
                "false_alarms": self.false_alarms, "per_class": self.per_class(), "per_engine": self.per_engine(),
                "cases": [{"name": c.name, "label": c.label, "engine": c.engine, "sufficient": c.sufficient,
                           "in_scope": c.in_scope, "answer": c.answer,
                           "confidence": c.confidence, "acceptable": c.acceptable,
                           **({"error": c.error} if c.error else {})} for c in self.cases]}


def load_case(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise BadInput(str(path), f"invalid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or "label" not in data or "log" not in data:
        raise BadInput(str(path), "not a corpus case (needs 'label' and 'log')")
    return data


def run_case(path: Path) -> CaseResult:
    from .api import classify_paths

    case = load_case(path)
    sufficient = str(case.get("sufficient", "yes")).lower() in ("yes", "true")
    meta = {"engine": str(case.get("engine") or "unknown"),
            "in_scope": str(case.get("scope", "in")).lower() != "out"}
    with tempfile.TemporaryDirectory(prefix="triage-case-") as tmp:
        folder = Path(tmp) / path.stem
        folder.mkdir()
        (folder / "server.log").write_text(str(case["log"]), encoding="utf-8")
        if case.get("metrics"):
            (folder / "metrics.txt").write_text(str(case["metrics"]), encoding="utf-8")
        try:
            verdict, _ = classify_paths([str(folder)])
        except TriageError as exc:
            return CaseResult(path.stem, case["label"], sufficient, "error", 0.0, str(exc), **meta)
        except Exception as exc:  # one broken case must not stop the scoring of the others
            return CaseResult(path.stem, case["label"], sufficient, "error", 0.0, f"{type(exc).__name__}: {exc}",
                              **meta)
    return CaseResult(path.stem, case["label"], sufficient, verdict.oom_class.value, verdict.confidence, **meta)


def evaluate_corpus(directory: str) -> EvalReport:
    files = sorted(p for p in Path(directory).glob("*.y*ml") if p.name.lower() not in ("readme.yaml",))
    if not files:
        raise BadInput(directory, "no case files (*.yaml) in this directory")
    return EvalReport([run_case(f) for f in files])
