from flywheel.config import load_config
from flywheel.domains.arithmetic import ArithmeticDomain
from flywheel.tasks.synthesize import novel_count, synthesize_settings, top_up

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

    for min_novel, max_batches, expected in [(0, 4, [0]), (2, 4, [0]), (3, 4, [0, 1]), (4, 4, [0, 1, 2]), (9, 3, [0, 1, 2])]:
        drawn = []
        pairs = top_up(draw, count, min_novel=min_novel, max_batches=max_batches)
        assert drawn == expected and len(pairs) == 3 * len(expected)


def test_top_up_settings_enter_the_fingerprint_only_when_they_act():
    def settings(**synthesize):
        return synthesize_settings(load_config(None, {f"synthesize.{k}": v for k, v in synthesize.items()}))

    off = settings(min_novel_share=0.0)
    assert "min_novel_share" not in off["synthesize"] and "domain" in off  # runs made before the keys existed
    assert settings(min_novel_share=0.0, max_batches=9) == off
    on = settings(min_novel_share=0.25)
    assert on["synthesize"]["min_novel_share"] == 0.25 and on["synthesize"]["max_batches"] == 4
    assert settings(min_novel_share=0.25, source="generator") == settings(source="generator")
    assert synthesize_settings(load_config(None), warmup=True) == off  # the seed round samples no proposer
