"""The confidence scale: the levels a verdict (or a phase answer) is given, named, in one place.

A confidence says how directly the evidence shows the class, not a measured probability. A class
module starts from a level, moves it by a named step for corroboration or doubt, and stops at its
ceiling. Two lines in thresholds.py read the scale: a verdict at or above CONFIDENT (0.5) is a
confident answer, and a runtime class below MIN_CONFIDENCE (0.4) is not named at all (unknown).
The same evidence earns the same level in every class module; the examples name where each is used.
"""
from __future__ import annotations

# --- ceilings: the most a verdict of that kind claims -------------------------------------------
CEILING_STARTUP = 0.97   # the engine's own start-up check decides phase and class
CEILING = 0.95           # several signals agree, none of them a message naming the class
CEILING_PREFIX = 0.92    # the prefix cache is judged from hit rates and pool shares, never named outright

# --- levels, strongest first --------------------------------------------------------------------
DECISIVE = 0.95          # phase: a start-up memory check failed for this very failure
VERY_HIGH = 0.85         # the server served and nothing failed; the failing stack is in start-up code
HIGH = 0.8               # the engine's own runtime OOM wording; a pool held by cached prefixes; pinned host memory
FAIRLY_HIGH = 0.75       # serving-loop frames or a failed step; a fragmentation or leak finding at the OOM
MEDIUM_HIGH = 0.7        # another source shows serving; a low hit rate the operator opted into
MEDIUM = 0.6             # load signals before a burst; the engine only reported ready; a leak with no OOM yet
MEDIUM_LOW = 0.55        # a start-up OOM before the phase evidence is weighed
EVEN = 0.5               # a low hit rate under an engine default that evicts under pressure
TENTATIVE_STRONG = 0.48  # a burst by default: serving-loop frames or the engine's runtime wording, no load numbers;
                         # healthy: start-up steps and no failure, the excerpt ending before the engine was up
TENTATIVE = 0.45         # a prefix-cache OOM on a known prefix-cache bug alone; only version and configuration lines, healthy;
                         # phase: a step that runs at start-up and now and then while serving failed, nothing else tells
TENTATIVE_WEAK = 0.44    # a burst by default: it had served, nothing about the load at the time
UNNAMED = 0.35           # something else explains it as well: below MIN_CONFIDENCE, so not named
NONE = 0.0               # no support at all

# --- steps ------------------------------------------------------------------------------------------
NUDGE = 0.03             # one more look-alike signal agrees
STEP = 0.05              # corroboration (a named cause, long uptime) or a little doubt
BIG_STEP = 0.1           # one more independent load signal or cause; the phase left unknown
BOOST = 0.15             # the engine version has a known bug of this very kind
PHASE_WEIGHT = 0.45      # how much of a start-up verdict rests on the phase answer's strength
