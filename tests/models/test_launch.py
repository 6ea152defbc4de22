"""Multi-process training through `accelerate launch`: a real two-process SFT pass on the CPU
(gloo) writes a checkpoint transformers loads and reports each step once; a failing launch
raises with its exit status and the log's last lines. About 40 s on two shared cores."""

import random
from dataclasses import asdict
from pathlib import Path

import pytest

from configs import load_config
from domains.arithmetic import ArithmeticDomain
from models.launch import PROGRESS_PREFIX, launch_pass, report, runtime_from
from models.runtime import LoraSettings, Precision, TrainRuntime
from models.tiny import build_tiny_model
from models.trainer import last_checkpoint
from tasks.train import train_settings

domain = ArithmeticDomain()


def _rows(count):
    rng = random.Random(0)
    return [{"prompt": domain.solver_prompt(p.text), "completion": p.reference, "weight": 1.0,
             "round": 0} for p in (domain.generate(rng, 1) for _ in range(count))]


def _launch(root, base, **overrides):
    arguments = {"base": base, "rows": _rows(32), "runtime": TrainRuntime(num_processes=2),
                 "train_settings": train_settings(load_config(None), 0),
                 "settings": {"learning_rate": 1e-2, "batch_size": 8, "max_length": 24},
                 "out_dir": root / "out", "work_dir": root / "trainer", "epochs": 2,
                 "max_steps": 6, "seed": 0, "save_steps": 3, "gradient_accumulation_steps": 1,
                 "resume_from": None, **overrides}
    return launch_pass("sft", **arguments)


def test_progress_lines_reach_the_callback_and_other_lines_do_not():
    seen = []
    for line in [f"{PROGRESS_PREFIX} 3 10 0.25\n", f"{PROGRESS_PREFIX} 4 10 -\n",
                 "[rank0] flywheel-progress is mentioned\n", "Writing model shards\n"]:
        report(line, lambda *a: seen.append(a))
    assert seen == [(3, 10, 0.25), (4, 10, None)]


def test_a_runtime_travels_through_the_spec_unchanged():
    runtime = TrainRuntime(precision=Precision("cuda", "bfloat16"), gradient_checkpointing=True,
                           lora=LoraSettings(rank=4, alpha=8.0, dropout=0.1,
                                             target_modules=("q_proj", "v_proj")),
                           num_processes=4)
    import json

    assert runtime_from(json.loads(json.dumps(asdict(runtime)))) == runtime
    assert runtime_from(json.loads(json.dumps(asdict(TrainRuntime())))) == TrainRuntime()


@pytest.mark.slow
def test_two_processes_train_over_gloo_into_a_checkpoint_that_loads(tmp_path):
    from transformers import AutoModelForCausalLM

    base = build_tiny_model(tmp_path / "init", hidden_size=64, num_layers=2, head_dim=32,
                            intermediate_size=128, init_seed=0)
    steps = []
    result = _launch(tmp_path, base, progress=lambda *a: steps.append(a[0]))
    assert result.steps == 6 and result.trained_tokens > 0
    assert steps == [1, 2, 3, 4, 5, 6]  # the main process reports, once per step
    checkpoint, incomplete = last_checkpoint(tmp_path / "trainer")
    assert checkpoint.name == "checkpoint-6" and not incomplete
    assert {p.name for p in checkpoint.glob("rng_state*")} == {"rng_state_0.pth",
                                                               "rng_state_1.pth"}
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    trained, initial = model.state_dict(), AutoModelForCausalLM.from_pretrained(base).state_dict()
    assert any((trained[name] != initial[name]).any() for name in initial)


@pytest.mark.slow
def test_a_failed_launch_raises_with_its_status_and_log_tail(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(RuntimeError, match=r"exited with status [1-9]") as failure:
        _launch(tmp_path, missing)
    assert "no-such-model" in str(failure.value)  # the processes' own error, from the log
    assert (tmp_path / "trainer" / "launch" / "log.txt").is_file()


PARENT = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.models.test_launch import _launch

def hold(step, total, loss):  # training is under way: tell the test, then wait to be killed
    Path({marker!r}).write_text(str(step))
    time.sleep(600)

_launch(Path({work!r}), Path({base!r}), progress=hold, max_steps=50, epochs=50)
"""


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a live process, None when it is gone (or a zombie)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return None if fields[0] in "ZX" else (int(fields[1]), fields[19])


def _descendants(root: int) -> dict[int, str]:
    """pid -> start time of every live process below `root`."""
    import os

    parents = {pid: stat for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
               if (stat := _stat(pid))}
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, started) in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = started
                frontier.append(pid)
    return found


@pytest.mark.slow
def test_no_training_process_survives_a_sigkilled_flywheel(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    base = build_tiny_model(tmp_path / "init", hidden_size=64, num_layers=2, head_dim=32,
                            intermediate_size=128, init_seed=0)
    marker = tmp_path / "training"
    script = PARENT.format(root=str(Path(__file__).resolve().parents[2]), marker=str(marker),
                           work=str(tmp_path), base=str(base))
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and parent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), "the launched training never reported a step"
        launched = _descendants(parent.pid)
        assert len(launched) >= 3, launched  # the launcher and its two workers
        # Keep the launch's output pipe open past the parent's death, as for processes in a long
        # silent step: only the parent-death signals can end them then, not a broken pipe.
        launcher = min(launched)
        pipe = os.readlink(f"/proc/{launcher}/fd/1")
        held = next(os.open(f"/proc/{parent.pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
                    for fd in os.listdir(f"/proc/{parent.pid}/fd")
                    if os.readlink(f"/proc/{parent.pid}/fd/{fd}") == pipe)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 60
        alive = launched
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = {pid: t for pid, t in launched.items() if (s := _stat(pid)) and s[1] == t}
        os.close(held)
        assert not alive, f"training processes outlived their SIGKILLed parent: {sorted(alive)}"
    finally:
        parent.kill()
        for pid, started in _descendants(parent.pid).items():
            if (s := _stat(pid)) and s[1] == started:
                os.kill(pid, signal.SIGKILL)
