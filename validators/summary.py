"""The gate report the CLI prints (`flywheel run`/`resume` on a failed gate, `flywheel validate`).

    FAILED  round 1 verify: verdicts, 800 rows, 21 expectations, 0.41 s
            /data/runs/demo/round-001/verdicts-5d1e2f3a4b5c.parquet
      x reward within [0.0, 1.0]   expect_column_values_to_be_between(reward)
          observed  1 of 800 rows, e.g. 1.7
          bound     [0, 1]
          rows      {"rollout_id": "c3..", "round": 1, "reward": 1.7, ...}
    passed  round 1 verify: ...

Offending rows are shown up to 5 per expectation, long values cut to 60 characters.

`flywheel validate` adds, first, a line per recorded output that is not as its catalog row says
(storage/integrity.py), and last a summary:

    DAMAGED  round 1 verify: /data/runs/demo/round-001/verdicts-5d1e2f3a4b5c.parquet: changed
             since it was recorded (sha256 7c6b5a4d3e2f..., recorded 3f2a1b0c9d8e...)
    ...
    12 datasets checked, 0 failed; 14 recorded outputs compared with the catalog, 1 damaged
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from validators.gate import FailedExpectation, GateFailed, GateResult

VALUE_CHARS = 60


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > VALUE_CHARS:
        return value[: VALUE_CHARS - 3] + "..."
    return value


def _where(result: GateResult) -> str:
    parts = []
    if result.round is not None:
        parts.append(f"round {result.round}")
    if result.stage:
        parts.append(result.stage)
    prefix = " ".join(parts)
    return f"{prefix}: {result.kind}" if prefix else result.kind


def failure_lines(failure: FailedExpectation) -> list[str]:
    frame = f" [{failure.frame}]" if failure.frame != "rows" else ""
    lines = [f"  x {failure.check}   {failure.name}{frame}"]
    if failure.error:
        lines.append(f"      error     could not be evaluated: {failure.error}")
    else:
        lines.append(f"      observed  {failure.observed}")
    lines.append(f"      bound     {failure.bound}")
    for index, row in enumerate(failure.rows):
        label = "rows" if index == 0 else ""
        text = json.dumps({k: _short(v) for k, v in row.items()}, default=str)
        lines.append(f"      {label:<9} {text}")
    return lines


def result_lines(result: GateResult) -> list[str]:
    rows = "?" if result.rows is None else result.rows
    sampled = ("" if result.sample_rows is None
               else f" (GX on the first {result.sample_rows}, the rest on every row)")
    head = (f"{'passed' if result.success else 'FAILED'}  {_where(result)}, {rows} rows, "
            f"{result.evaluated} expectations{sampled}, {result.seconds:.2f} s")
    if result.success:
        return [head]
    lines = [head, f"        {result.path}"]
    for failure in result.failures:
        lines += failure_lines(failure)
    return lines


def print_results(results: Iterable[GateResult], echo: Callable[[str], Any] = print) -> bool:
    """Print every result (failed ones in full); True when all passed."""
    ok = True
    for result in results:
        ok = ok and result.success
        for line in result_lines(result):
            echo(line)
    return ok


def print_gate_failure(exc: GateFailed, run_id: str, echo: Callable[[str], Any] = print) -> None:
    """What `flywheel run`/`resume` prints when a gate stops the round."""
    echo(f"round {exc.round} stopped: the {exc.stage} stage's output failed its data gate; "
         "nothing downstream ran and the files are kept for audit.")
    print_results(exc.results, echo)
    echo(f"fix the data or the thresholds under [gates] in a config file, then run "
         f"`flywheel resume {run_id} --config FILE` (the stored output is checked again, not "
         f"recomputed); `flywheel validate {run_id}` re-checks stored data.")


class ValidateError(ValueError):
    """`flywheel validate` cannot run: unknown run, no catalog, nothing matches the filters."""


@dataclass
class ValidateReport:
    """What `flywheel validate` found: the gates re-run on every stored dataset, the stages whose
    catalog lost a `datasets` row, and every recorded output compared with its catalog row
    (storage/integrity.py: missing, truncated, changed checksum, a checkpoint without weights,
    config or tokenizer). `lines` is the text the command prints, `record` its `--format json`.
    """

    run_id: str
    gates: list[GateResult]
    lost: list[dict[str, Any]]
    compared: int
    damaged: list[Any]  # storage.integrity.Damage

    @property
    def ok(self) -> bool:
        return all(r.success for r in self.gates) and not self.lost and not self.damaged

    def lines(self) -> list[str]:
        out = [f"DAMAGED  {damage}" for damage in self.damaged]
        for result in self.gates:
            out += result_lines(result)
        for row in self.lost:
            out.append(f"FAILED  round {row['round']} {row['stage']}: the catalog lists "
                       f"{row['listed']} of the {row['outputs']} datasets the stage wrote (a "
                       f"catalog row was lost); `flywheel resume {self.run_id}` recomputes the "
                       "stage")
        failed = sum(not r.success for r in self.gates) + len(self.lost)
        out.append(f"{len(self.gates) + len(self.lost)} datasets checked, {failed} failed; "
                   f"{self.compared} recorded outputs compared with the catalog, "
                   f"{len(self.damaged)} damaged")
        if self.damaged:
            out.append(f"`flywheel resume {self.run_id}` recomputes what is damaged")
        return out

    def record(self) -> dict[str, Any]:
        """The report as JSON-ready data (snake_case keys; GX's own result JSON left out)."""
        return {"run_id": self.run_id, "ok": self.ok, "damaged": self.damaged,
                "outputs_compared": self.compared, "lost_outputs": self.lost,
                "gates": [{k: v for k, v in r.to_json().items() if k != "gx"}
                          for r in self.gates]}


def validate_run(data_root: Any, run_id: str, *, round_index: int | None = None,
                 stage: str | None = None, config_path: Any = None) -> ValidateReport:
    """`flywheel validate`: compare every recorded output with its catalog row, and re-run the
    gates on stored data with the run's recorded `[gates]` thresholds (or those of
    `config_path`); nothing is written. A file found missing or unreadable is reported once, as
    damaged, not again as its gate's read error."""
    from configs import load_config, validate_config
    from storage.catalog import Catalog
    from storage.integrity import check_run
    from validators.gate import validate_stored

    catalog = Catalog(data_root)
    if not catalog.path.exists():
        raise ValidateError(f"no catalog at {catalog.path} (check --data-root)")
    recorded = catalog.run_config_json(run_id)
    if recorded is None:
        raise ValidateError(f"unknown run id {run_id!r} in {catalog.path} (see `flywheel status`)")
    if config_path is not None:
        gates = load_config(config_path).gates
    else:  # only the thresholds matter here, so a run recorded by an older version still validates
        gates = validate_config({"gates": json.loads(recorded).get("gates", {})},
                                f"run {run_id} (its recorded [gates])").gates
    integrity = check_run(catalog, run_id, round_index=round_index, stage=stage)
    unreadable = {d.path for d in integrity.damaged if d.problem in ("missing", "unreadable")}
    results = [r for r in validate_stored(catalog, run_id, gates, round_index=round_index,
                                          stage=stage) if r.path not in unreadable]
    lost = [row for row in catalog.lost_outputs(run_id)
            if (round_index is None or row["round"] == round_index)
            and (stage is None or row["stage"] == stage)]
    if not results and not lost and not integrity.checked:
        which = "".join([f" round {round_index}" if round_index is not None else "",
                         f" stage {stage!r}" if stage else ""])
        raise ValidateError(f"run {run_id} has no stored outputs{which} to validate "
                            "(see `flywheel status`)")
    return ValidateReport(run_id, results, lost, integrity.checked, integrity.damaged)


class _DropGateFailed(logging.Filter):
    """Drops log records about a GateFailed (Prefect logs failed tasks and flows with their
    traceback); the gate report printed by the CLI says everything they would."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, GateFailed):
            return False
        try:
            return "GateFailed" not in record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot format is not ours to drop
            return True


def quiet_gate_tracebacks() -> None:
    """Attach the filter to the console handlers Prefect installed (call after importing it)."""
    drop = _DropGateFailed()
    for name in ("", "prefect", "prefect.flow_runs", "prefect.task_runs"):
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, _DropGateFailed) for f in handler.filters):
                handler.addFilter(drop)
