"""Retries: transient errors are retried with backoff, gate failures and bad input never."""

import itertools

import pytest
from prefect import flow, task

from models.passes import is_out_of_memory
from storage.datasets import DatasetError
from tasks.retry import TRANSIENT, is_transient, retry_transient


class GateFailed(Exception):  # stands in for validators' class: matched by name
    pass


class StrictGateFailed(GateFailed, RuntimeError):  # even when it is also a RuntimeError
    pass


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (OSError("disk hiccup"), True),
        (ConnectionError("server went away"), True),
        (RuntimeError("CUDA error: an illegal memory access"), True),
        (MemoryError(), True),
        (GateFailed("problems: expectation failed"), False),
        (StrictGateFailed("rollouts"), False),
        (DatasetError("rollouts row 3: missing columns"), False),
        (ValueError("no training rows"), False),
        (KeyError("x"), False),
    ],
)
def test_which_errors_are_transient(exc, retried):
    assert is_transient(exc) is retried


def test_policy_has_backoff():
    delays = TRANSIENT["retry_delay_seconds"](TRANSIENT["retries"])
    assert len(delays) == TRANSIENT["retries"] >= 1
    assert all(later > earlier for earlier, later in itertools.pairwise(delays))


def test_out_of_memory_is_recognised():
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried"))
    assert is_out_of_memory(type("OutOfMemoryError", (RuntimeError,), {})("CUDA out of memory"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))


@pytest.mark.slow
def test_prefect_retries_transient_errors_but_not_gate_failures(prefect_server):
    attempts = {"transient": 0, "gate": 0}

    @task(retries=2, retry_delay_seconds=0, retry_condition_fn=retry_transient)
    def flaky(kind: str) -> str:
        attempts[kind] += 1
        if kind == "transient" and attempts[kind] < 2:
            raise OSError("backend connection reset")
        if kind == "gate":
            raise GateFailed("rollouts gate failed")
        return "ok"

    @flow
    def both() -> tuple[str, str]:
        ok = flaky("transient")
        try:
            flaky("gate")
        except GateFailed:
            return ok, "gate failed"
        return ok, "gate passed"

    assert both() == ("ok", "gate failed")
    assert attempts == {"transient": 2, "gate": 1}


def test_the_real_gate_failure_is_never_retried():
    from validators.gate import GateFailed as RealGateFailed

    assert not is_transient(RealGateFailed("rollouts", 1, []))
