"""The masking functions, where the recovery modules have always imported them from.

They live in `triage.redact` (outside this package, so `triage classify` can mask its output
without importing recovery); see there for what counts as a secret.
"""
from __future__ import annotations

from ..redact import (MASK, is_secret_key, mask, mask_prompts, mask_text, redact, redact_argv, redact_output,
                      redact_text)

__all__ = ["MASK", "is_secret_key", "mask", "mask_prompts", "mask_text", "redact", "redact_argv", "redact_output",
           "redact_text"]
