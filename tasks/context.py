"""What every stage of a run needs: where data lives, the run's config, its catalog, its domain."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from configs import RunConfig
from domains import Domain, get_domain
from storage.catalog import Catalog
from storage.paths import run_folder
from storage.seeds import stage_seed


@dataclass(frozen=True)
class Checkpoint:
    """A model folder and the fingerprint of what produced it."""

    path: Path
    fingerprint: str


@dataclass
class RunContext:
    data_root: Path
    run_id: str
    config: RunConfig
    catalog: Catalog = field(init=False)
    domain: Domain = field(init=False)
    _judged: tuple[str, Domain] | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.data_root = Path(self.data_root)
        self.catalog = Catalog(self.data_root)
        self.domain = get_domain(self.config.domain.name, self.config)

    def judging_domain(self, incumbent: Checkpoint) -> Domain:
        """The domain that judges the answers of a round whose incumbent is `incumbent`: with
        `[verify.judge] incumbent = true` judged by that checkpoint (domains/judge.py
        `incumbent_judged`; one incumbent's judge kept at a time), else `domain`. Held-out
        answers are judged by `domain`, the fixed judge."""
        from domains.judge import incumbent_judged

        if self._judged is None or self._judged[0] != incumbent.fingerprint:
            self._judged = (incumbent.fingerprint,
                            incumbent_judged(self.domain, incumbent.path, incumbent.fingerprint))
        return self._judged[1]

    @property
    def run_dir(self) -> Path:
        return run_folder(self.data_root, self.run_id)

    def stage_seed(self, stage: str, round_index: int) -> int:
        """The seed of `stage` in `round_index` (storage/seeds.py `stage_seed`): it follows the
        run's seed, never a fingerprint, so a config change that renames files keeps the rows."""
        return stage_seed(self.config.seed, stage, round_index)
