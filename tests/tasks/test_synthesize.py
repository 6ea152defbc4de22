from configs import load_config
from domains.arithmetic import ArithmeticDomain
from tasks.synthesize import (
    generator_fill,
    novel_count,
    novel_texts,
    top_up,
)

domain = ArithmeticDomain()


def test_novel_count_leaves_out_invalid_repeated_seen_and_heldout_problems():
    pairs = [("p", "1+2"), ("p", "1+2"), ("p", "1+"), ("p", "3*4"), ("p", "5-6"), ("p", " 7+8")]
    assert novel_count(domain, pairs, seen={"3*4"}, heldout={"5-6"}) == 2  # 1+2 and 7+8


def test_top_up_draws_batches_until_enough_novel_problems_or_the_cap():
    def draw(batch):  # every batch: two repeats of the first batch's problem and one new problem
        drawn.append(batch)
        return [("p", "1+1"), ("p", "1+1"), ("p", f"{batch}*2")]

    def count(pairs):
        return novel_count(domain, pairs, seen=set(), heldout=set())

    for min_novel, max_batches, expected in [(0, 4, [0]), (2, 4, [0]), (3, 4, [0, 1]),
                                             (4, 4, [0, 1, 2]), (9, 3, [0, 1, 2])]:
        drawn = []
        pairs = top_up(draw, count, min_novel=min_novel, max_batches=max_batches)
        assert drawn == expected and len(pairs) == 3 * len(expected)


def test_synthesize_settings_cover_what_its_round_reads():
    from configs.settings import SeedSynthesizeSettings, SynthesizeSettings, stage_settings

    def settings(round_index=1, **synthesize):
        return stage_settings(load_config(None, {f"synthesize.{k}": v
                                                 for k, v in synthesize.items()}),
                              "synthesize", round_index)

    rounds = settings()
    assert isinstance(rounds, SynthesizeSettings) and rounds.backend.batch_size == 512
    for key, value in [("min_novel_share", 0.0), ("max_batches", 9), ("top_up", "proposer")]:
        assert settings(**{key: value}) != rounds, key  # every [synthesize] key counts in a round
        assert settings(0, **{key: value}) == settings(0), key  # the warm-up reads none of them
    assert isinstance(settings(0), SeedSynthesizeSettings)
    assert settings(0, ngram=4) != settings(0)  # but the admission's


def test_novel_texts_are_the_problems_novel_count_counts():
    pairs = [("p", "1+2"), ("p", " 7+8"), ("p", "3*4"), ("p", "1+")]
    assert novel_texts(domain, pairs, seen={"3*4"}, heldout=set()) == {"1+2", "7+8"}


def test_generator_fill_takes_fresh_problems_of_the_levels_up_to_the_shortfall():
    exclude = {"1+2", "7+8"}
    fill = generator_fill(domain, missing=50, exclude=exclude, levels=[2, 3, 4], seed=3,
                          batch=64, max_batches=4)
    texts = [text for _, text in fill]
    assert len(texts) == 50 and len(set(texts)) == 50 and not exclude & set(texts)
    levels = [domain.parse(text).level for text in texts]
    assert set(levels) == {2, 3, 4}
    assert all(prompt == domain.proposer_prompt(level)
               for (prompt, _), level in zip(fill, levels, strict=True))
    assert generator_fill(domain, missing=50, exclude=exclude, levels=[2, 3, 4], seed=3,
                          batch=64, max_batches=4) == fill  # seeded
    assert generator_fill(domain, missing=0, exclude=set(), levels=[2, 3, 4], seed=3,
                          batch=64, max_batches=4) == []


def test_generator_fill_stops_after_max_batches_when_the_levels_run_dry():
    # level 1 holds 200 problems (one-digit sums and differences); all but 2 already seen
    every = {text for _, text in generator_fill(domain, missing=10_000, exclude=set(), levels=[1],
                                                seed=0, batch=4000, max_batches=1)}
    assert len(every) == 200
    left = sorted(every)[:2]
    fill = generator_fill(domain, missing=10, exclude=every - set(left), levels=[1],
                          seed=1, batch=4000, max_batches=2)
    assert sorted(text for _, text in fill) == left


def test_the_fixed_scheduler_raises_the_level_one_per_round_up_to_max_level():
    from tasks.synthesize import baseline_proposals, scheduled_levels

    def levels(scheduler, round_index):
        synth = load_config(None, {"synthesize.level_scheduler": scheduler}).synthesize
        return scheduled_levels(synth, min_level=2, max_level=4, round_index=round_index)

    assert [levels("fixed", r) for r in (1, 2, 3, 4, 9)] == [[2], [3], [4], [4], [4]]
    assert levels("cycle", 3) == levels("bandit", 3) == [2, 3, 4]  # every level, every round
    drawn = baseline_proposals(domain, "generator", count=50, levels=levels("fixed", 2),
                               round_seed=1, pool_seed=0)
    assert {domain.parse(text).level for _, text in drawn} == {3}
