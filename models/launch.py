"""Multi-process training: with `[train] num_processes = N > 1` each trainer pass runs as
`accelerate launch --multi_gpu --num_processes N -m models.launch <spec>`, a subprocess the
train stage owns. On GPUs it is one process per GPU (NCCL); on the CPU the same command runs N
processes over gloo (the multi-process CPU test uses it). The pass's inputs travel as files in
`<work_dir>/launch/`:

    launch/spec.json   {"kind": "sft", "base": ".../checkpoint-1a2b", "out_dir": ..., ...,
                        "settings": {"learning_rate": 0.002, ...}, "common": {"epochs": 20.0, ...},
                        "runtime": {"precision": {"device": "cuda", "dtype": "bfloat16"}, ...},
                        "train_settings": {"class": "TrainSettings", "settings": {...}}}
                                                        # GRPO: the verifier's domain is rebuilt
    launch/rows.json   the pass's training rows
    launch/log.txt     everything the processes printed
    launch/result.json the TrainResult, written by the main process last

The main process prints one `flywheel-progress <step> <total> <loss>` line per optimizer step;
the train stage reads them and advances its progress bar (and the crash tests' pause points).
A non-zero exit raises with the exit status and the log's last lines, so the error names what
failed in the processes (an out-of-memory there reads as one here: models/passes.py retries it).
Resuming works as in one process: the Trainer's checkpoints in `work_dir` hold every rank's RNG
state, and `common["resume_from"]` names the one to continue from.

No training process outlives the flywheel process, however it dies (SIGKILL included). The
launcher runs as `python -m models.launch --launcher PARENT_PID <accelerate launch arguments>`
in its own session and process group (a terminal's Ctrl-C reaches the run, which ends the
group); it arms the kernel's parent-death signal (Linux `PR_SET_PDEATHSIG`, SIGTERM: torchrun's
agent then stops its workers) and exits at once if the flywheel is already gone, then runs
`accelerate launch` in-process. Each worker arms SIGKILL on the launcher's death the same way
(the launcher's pid travels in `FLYWHEEL_LAUNCHER_PID`), so a launcher killed outright takes its
workers along. The signal follows the *thread* that started the launcher, which waits on it
until it exits.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import deque
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from models.runtime import LoraSettings, Precision, TrainRuntime
from models.trainer import TrainProgress, TrainResult
from storage.processes import die_with

PROGRESS_PREFIX = "flywheel-progress"
LAUNCHABLE = ("sft", "grpo", "dpo")  # the proposer's GRPO pass samples the incumbent online
LOG_TAIL_LINES = 25
# the last line of a Python traceback (`OSError: ...`), possibly prefixed `[rank0]: ` by torchrun
_EXCEPTION_LINE = re.compile(r"^(\[rank\d+\]:\s*)?([\w.]+(Error|Exception|Interrupt)\b.*)$")
# per-pass keyword arguments that are paths (JSON carries them as strings)
_PATH_KEYS = ("base", "out_dir", "work_dir", "resume_from")


def trainer_of(kind: str, domain: Any) -> Any:
    """The trainer function of pass `kind` ("sft", "grpo", "dpo"); GRPO's with the verifier of
    `domain` bound as its reward, journaling an LLM judge's judgements into the pass's
    `work_dir` (models/grpo_journal.py `JudgementJournal`)."""

    if kind not in LAUNCHABLE:
        msg = (f"a {kind!r} pass cannot run in several processes (train.num_processes > 1 runs "
               f"{', '.join(LAUNCHABLE)} passes); set train.num_processes = 1")
        raise ValueError(msg)
    if kind == "grpo":
        from models.grpo import train_grpo, verifier_reward
        from models.grpo_journal import JOURNAL

        def grpo(*, work_dir: Path, **arguments: Any) -> Any:  # judgements into its work_dir
            reward = verifier_reward(domain, journal=Path(work_dir) / JOURNAL)
            return train_grpo(reward=reward, work_dir=work_dir, **arguments)

        return grpo
    if kind == "dpo":
        from models.dpo import train_dpo

        return train_dpo
    from models.trainer import train_sft

    return train_sft


LAUNCHER_FLAG = "--launcher"
LAUNCHER_PID = "FLYWHEEL_LAUNCHER_PID"  # the launcher's pid, which its workers die with


def launch_command(spec: Path, num_processes: int) -> list[str]:
    """The command line of one pass: `accelerate launch` (this interpreter, a free port) behind
    the launcher that dies with this process (`run_launcher`)."""
    return [sys.executable, "-m", "models.launch", LAUNCHER_FLAG, str(os.getpid()), "--multi_gpu",
            "--num_processes", str(num_processes), "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
            "-m", "models.launch", str(spec)]


def write_spec(kind: str, *, rows: list[dict[str, Any]], runtime: TrainRuntime,
               settings: dict[str, Any], train_settings: BaseModel,
               judge: tuple[Path, str] | None = None, **common: Any) -> Path:
    """Write the pass's spec and rows into `<common work_dir>/launch/`; returns the spec path.
    `judge`: the incumbent's (folder, fingerprint) where it judges GRPO's samples."""
    folder = Path(common["work_dir"]) / "launch"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rows.json").write_text(json.dumps(rows, default=str))
    (folder / "result.json").unlink(missing_ok=True)
    paths = {key: None if common.get(key) is None else str(common[key]) for key in _PATH_KEYS}
    spec = {"kind": kind, **paths, "settings": settings, "runtime": asdict(runtime),
            "common": {k: v for k, v in common.items() if k not in _PATH_KEYS},
            "train_settings": {"class": type(train_settings).__name__,
                               "settings": train_settings.model_dump(mode="json")},
            "judge": None if judge is None else {"path": str(judge[0]), "fingerprint": judge[1]}}
    (folder / "spec.json").write_text(json.dumps(spec))
    return folder / "spec.json"


def launch_pass(kind: str, *, progress: TrainProgress | None = None, **arguments: Any
                ) -> TrainResult:
    """Run one trainer pass in `runtime.num_processes` processes through `accelerate launch`.

    Parameters
    ----------
    kind
        "sft", "grpo" or "dpo".
    progress
        Called with (step, total, loss) for every step the main process reports.
    **arguments
        `rows`, `runtime`, `settings` (the pass's trainer settings), `train_settings` (the
        train stage's settings, configs/settings.py: GRPO's domain is rebuilt from them),
        `judge` (the incumbent's folder and fingerprint where it judges, else None) and
        the arguments every trainer takes (`base`, `out_dir`, `work_dir`, `epochs`,
        `max_steps`, `seed`, `save_steps`, `gradient_accumulation_steps`, `resume_from`).

    Returns
    -------
    TrainResult
        As the main process recorded it.

    Raises
    ------
    RuntimeError
        The launch exited non-zero: its status and the log's last lines.
    """
    if kind not in LAUNCHABLE:
        trainer_of(kind, None)  # raises before anything is launched
    spec = write_spec(kind, **arguments)
    log = spec.parent / "log.txt"
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    errors: list[str] = []  # exception lines; the processes' last one is what they raised
    with log.open("w") as sink, subprocess.Popen(
            launch_command(spec, arguments["runtime"].num_processes), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True) as process:
        try:
            for line in process.stdout:
                sink.write(line)
                tail.append(line.rstrip())
                if found := _EXCEPTION_LINE.match(line.rstrip()):
                    errors.append(found.group(2))
                report(line, progress)
            status = process.wait()
        except BaseException:
            os.killpg(process.pid, 9)  # no orphaned training processes after an interruption
            raise
    if status != 0 or not (spec.parent / "result.json").is_file():
        raised = [e for e in errors if "ChildFailedError" not in e] or ["no exception printed"]
        lines = "\n".join(tail)
        msg = (f"accelerate launch of the {kind} pass ({arguments['runtime'].num_processes} "
               f"processes) exited with status {status}: {raised[-1]}; the last lines of {log}:"
               f"\n{lines}")
        raise RuntimeError(msg)
    stored = json.loads((spec.parent / "result.json").read_text())
    return TrainResult(**{**stored, "rewards": tuple(stored["rewards"]),
                          "curve": tuple(stored.get("curve", ()))})


def report(line: str, progress: TrainProgress | None) -> None:
    """Pass a `flywheel-progress` line of the main process on to `progress`."""
    parts = line.split()
    if progress is None or len(parts) != 4 or parts[0] != PROGRESS_PREFIX:
        return
    progress(int(parts[1]), int(parts[2]), None if parts[3] == "-" else float(parts[3]))


def runtime_from(data: dict[str, Any]) -> TrainRuntime:
    """The TrainRuntime a spec's `runtime` (its `asdict`) describes."""
    lora = data["lora"]
    if lora is not None:
        modules = lora["target_modules"]
        lora = LoraSettings(**{**lora, "target_modules": modules if isinstance(modules, str)
                               else tuple(modules)})
    return TrainRuntime(precision=Precision(**data["precision"]),
                        gradient_checkpointing=data["gradient_checkpointing"], lora=lora,
                        num_processes=data["num_processes"])


def run_launcher(parent: int, accelerate_arguments: list[str]) -> None:
    """The launcher process: die with `parent`, then `accelerate launch` in this process."""
    die_with(parent, signal.SIGTERM)
    os.environ[LAUNCHER_PID] = str(os.getpid())
    from accelerate.commands.launch import main

    sys.argv = ["accelerate launch", *accelerate_arguments]
    main()


def settings_domain(train_settings: dict[str, Any], judge: dict[str, str] | None = None) -> Any:
    """The domain of a spec's `train_settings` (the train stage's settings model as
    {"class": ..., "settings": ...}), built as the run built it (domains.get_domain); judged by
    the incumbent at `judge["path"]` where the spec names one (`[verify.judge] incumbent`)."""
    from configs import settings as stage_settings
    from domains import get_domain
    from domains.judge import incumbent_judged

    model = {"TrainSettings": stage_settings.TrainSettings,
             "WarmupTrainSettings": stage_settings.WarmupTrainSettings}[train_settings["class"]]
    domain = model.model_validate(train_settings["settings"]).domain
    built = get_domain(domain.domain.name, domain.domain_config())
    return built if judge is None else incumbent_judged(built, judge["path"], judge["fingerprint"])


def run_spec(spec_path: Path) -> None:
    """A launched process: train the spec's pass; the main process prints the progress lines
    and writes `result.json` (atomically: temporary file, then rename)."""
    spec = json.loads(Path(spec_path).read_text())
    main = os.environ.get("RANK", "0") == "0"  # torchrun's global rank of this process

    def progress(step: int, total: int, loss: float | None) -> None:
        if main:
            print(PROGRESS_PREFIX, step, total, "-" if loss is None else loss, flush=True)

    domain = None
    if spec["kind"] == "grpo":
        domain = settings_domain(spec["train_settings"], spec.get("judge"))
    paths = {key: None if spec[key] is None else Path(spec[key]) for key in _PATH_KEYS}
    result = trainer_of(spec["kind"], domain)(
        rows=json.loads((Path(spec_path).parent / "rows.json").read_text()),
        runtime=runtime_from(spec["runtime"]), progress=progress, **paths,
        **spec["settings"], **spec["common"])
    if main:
        temp = Path(spec_path).parent / "result.json.tmp"
        temp.write_text(json.dumps(asdict(result)))
        temp.rename(temp.with_suffix(""))
    _leave_group()


def _leave_group() -> None:
    """Wait for every process, then tear the process group down: a process that exits with
    gloo's threads still running aborts ("terminate called without an active exception")."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == LAUNCHER_FLAG:
        run_launcher(int(sys.argv[2]), sys.argv[3:])
    else:
        if LAUNCHER_PID in os.environ:
            die_with(int(os.environ[LAUNCHER_PID]), signal.SIGKILL)
        run_spec(Path(sys.argv[1]))
