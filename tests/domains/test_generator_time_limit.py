"""A reasoning-gym generator that stalls stops the run with one line naming the task
(`[domain.reasoning_gym] item_seconds`, domains/reasoning_gym.py `time_limit`)."""

from __future__ import annotations

import random
import threading
import time

import pytest

from configs import load_config
from domains import get_domain
from domains.reasoning_gym import GENERATOR_SEED, GeneratorTooSlow, time_limit
from tasks.retry import is_transient


def _stall():
    while True:
        pass


def test_a_stalled_block_stops_at_the_limit_with_one_line_naming_it():
    started = time.monotonic()
    with pytest.raises(GeneratorTooSlow, match=r"^task 'x' took more than 0.2 s") as error:
        with time_limit(0.2, "task 'x'"):
            _stall()
    assert time.monotonic() - started < 5 and "\n" not in str(error.value)
    assert not is_transient(error.value)  # the same seed stalls again: never retried


def test_a_quick_block_is_left_alone_and_nothing_arrives_after_it():
    with time_limit(0.2, "quick"):
        total = sum(range(1000))
    time.sleep(0.4)  # past the limit: the cancelled timer raises nothing
    assert total == 499500


def test_the_limit_holds_in_a_worker_thread():
    caught = []

    def work():
        try:
            with time_limit(0.2, "in a thread"):
                _stall()
        except GeneratorTooSlow as exc:
            caught.append(str(exc))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(10)
    assert not worker.is_alive() and caught and caught[0].startswith("in a thread took more")


class _StalledDataset:
    def __getitem__(self, index):
        _stall()


def test_the_domain_names_the_task_whose_generator_stalls():
    config = load_config(None, {"domain.name": "reasoning_gym", "domain.min_level": 1,
                                "domain.max_level": 2, "domain.reasoning_gym.item_seconds": 0.3,
                                "domain.reasoning_gym.tasks": {"basic_arithmetic": 1.0,
                                                               "spell_backward": 1.0}})
    domain = get_domain("reasoning_gym", config)
    assert domain.generate_task(random.Random(0), "basic_arithmetic", 1).text  # a quick task
    domain._datasets[("spell_backward", 2, GENERATOR_SEED)] = _StalledDataset()
    with pytest.raises(GeneratorTooSlow) as error:
        domain.generate_task(random.Random(0), "spell_backward", 2)
    message = str(error.value)
    assert "'spell_backward' (level 2" in message and "item_seconds" in message
    assert "\n" not in message


def test_the_limit_is_part_of_the_domain_settings():
    from configs.settings import DomainSettings

    def settings(seconds):
        return DomainSettings.from_config(load_config(None, {
            "domain.name": "reasoning_gym", "domain.reasoning_gym.item_seconds": seconds}))

    assert settings(5.0).domain.reasoning_gym.item_seconds == 5.0
