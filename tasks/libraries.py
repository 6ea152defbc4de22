"""The libraries a stage imports when it computes, kept out of the cyclic collector's full
collections.

A full collection scans every tracked object outside the frozen set. With torch and Prefect
imported that is some 160,000 objects before a run made any; transformers, Great Expectations
and TRL add 550,000 more (their modules' classes, functions, constants: alive until exit), and
a collection then takes 0.3 s, twice or more a round. `gc.freeze()` moves the objects that
exist at the time out of the collector's sight, after one collection so that no garbage is kept
with them; what the run creates later is collected as before.

A process that froze its imports (`freeze_imports`; flows/execution.py `execute` does, once its
own are done) also imports, before a stage first computes, what that stage will import
(`STAGE_LIBRARIES`) and freezes it (`import_for`): one more collection the first time each of
them is imported, none after. A stage found done imports nothing, so a resume that reuses
every stage pays for no library it does not use. A process that never froze (a test, a
notebook running a stage) is left as it is.

    freeze_imports()          # execute: after its imports, while the server starts
    import_for("train")       # tasks/stage.py, before the train stage computes
"""

from __future__ import annotations

import gc
import importlib
import sys

MODEL = ("transformers.models.auto.modeling_auto",)
GATES = ("validators.gx_results", "great_expectations.expectations")
TRAINING = ("trl",)
# What each stage imports when it computes (a stage not named imports none of these)
STAGE_LIBRARIES: dict[str, tuple[str, ...]] = {
    "base": MODEL, "proposer-base": MODEL, "baseline": MODEL + GATES,
    "synthesize": MODEL + GATES, "rollout": MODEL + GATES, "verify": GATES, "curate": GATES,
    "rationalize": MODEL + GATES, "train": MODEL + TRAINING, "evaluate": MODEL + GATES,
}
_frozen: list[int] = []  # freezes so far, the module count at each


def freeze_imports() -> None:
    """Collect once, then freeze every object that exists now; a call with no module imported
    since the last one does nothing."""
    if _frozen and _frozen[-1] == len(sys.modules):
        return
    gc.collect()
    gc.freeze()
    _frozen.append(len(sys.modules))


def import_for(stage: str) -> None:
    """Before `stage` computes, in a process that froze its imports: import its libraries
    (`STAGE_LIBRARIES`) and, when that imported anything, freeze them."""
    if not _frozen:
        return
    before = len(sys.modules)
    for name in STAGE_LIBRARIES.get(stage, ()):
        importlib.import_module(name)
    if len(sys.modules) > before:
        freeze_imports()
