import string
import time

import numpy as np
import pytest

from domains.arithmetic import ArithmeticDomain
from tasks.curriculum import dedup
from tasks.curriculum.dedup import (
    clusters,
    lsh_bands,
    near_duplicates,
    shingle_hashes,
    signatures,
)
from tasks.synthesize import admit

ALPHABET = string.ascii_letters  # 52 distinct characters: no n-gram repeats inside a string


def jaccard(a: str, b: str, n: int) -> float:
    grams = [{s[i:i + n] for i in range(max(len(s) - n + 1, 1))} for s in (a, b)]
    return len(grams[0] & grams[1]) / len(grams[0] | grams[1])


@pytest.mark.parametrize(
    ("texts", "ngram", "counts"),
    [(["abcd"], 3, [2]), (["ab"], 3, [1]), ([""], 3, [1]), (["abc", "x", "12345"], 2, [2, 1, 4]),
     (["héllo"], 2, [4])],
)
def test_shingles_per_text(texts, ngram, counts):
    hashes, offsets = shingle_hashes(texts, ngram)
    assert np.diff(np.append(offsets, len(hashes))).tolist() == counts


def test_equal_ngrams_hash_equal_across_texts_and_positions():
    hashes, _ = shingle_hashes(["xabc", "abcy"], 3)  # "abc" at position 1 and 0
    assert hashes[1] == hashes[2]
    assert len(set(hashes.tolist())) == 3


@pytest.mark.parametrize(
    ("new", "earlier", "threshold", "expected"),
    [
        (["1234+5679"], ["1234+5678"], 0.5, [True]),    # J = 6/8
        (["1234+5679"], ["1234+5678"], 1.0, [False]),   # 1.0: identical n-gram sets only
        (["1234+5678"], ["1234+5678"], 1.0, [True]),
        (["37+6"], ["37+5"], 0.5, [False]),             # J = 1/3: a different problem
        (["12+345", "12+346", "9*9"], [], 0.5, [False, True, False]),  # J = 3/5 inside the batch
        (["9*9"], [], 0.5, [False]),
        ([], ["1+1"], 0.5, []),
    ],
)
def test_near_duplicates(new, earlier, threshold, expected):
    assert near_duplicates(new, earlier, threshold=threshold, ngram=3) == expected


def test_a_text_matching_only_a_dropped_text_is_kept():
    a, b, c = ALPHABET[0:30], ALPHABET[6:36], ALPHABET[12:42]
    assert jaccard(a, b, 3) > 0.6 and jaccard(b, c, 3) > 0.6 and jaccard(a, c, 3) < 0.45
    # b repeats a (dropped); c repeats only b, which was dropped, so c is kept
    assert near_duplicates([a, b, c], [], threshold=0.52, ngram=3) == [False, True, False]
    assert clusters([a, b, c, "zzz"], threshold=0.52, ngram=3) == [0, 0, 0, 3]


@pytest.mark.parametrize(("a", "b", "n"), [("1234+5678", "1234+5679", 3),
                                           (ALPHABET[:30], ALPHABET[6:36], 3),
                                           ("112+34*5", "12+34*56", 2)])
def test_signature_agreement_estimates_jaccard(a, b, n):
    sig = signatures([a, b], ngram=n, num_perm=512)
    assert abs((sig[0] == sig[1]).mean() - jaccard(a, b, n)) < 0.07  # 3.5 sd at num_perm 512


def test_signatures_are_seeded_and_chunking_does_not_change_them(monkeypatch):
    texts = [f"{i}+{i * 7 % 101}" for i in range(3000)]
    whole = signatures(texts, ngram=3, seed=5)
    assert (whole == signatures(texts, ngram=3, seed=5)).all()
    assert not (whole == signatures(texts, ngram=3, seed=6)).all()
    monkeypatch.setattr(dedup, "_CHUNK_TEXTS", 97)
    assert (whole == signatures(texts, ngram=3, seed=5)).all()


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.8, 0.95])
def test_lsh_bands_find_a_pair_at_the_threshold_with_high_probability(threshold):
    bands, rows = lsh_bands(threshold)
    assert bands * rows <= dedup.NUM_PERM
    assert 1 - (1 - threshold**rows) ** bands >= 0.97


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_threshold_out_of_range_is_an_error(bad):
    with pytest.raises(ValueError, match="threshold"):
        near_duplicates(["a"], [], threshold=bad, ngram=3)


def test_candidate_pairs_grow_linearly_not_with_all_pairs():
    rng = np.random.default_rng(0)
    letters = np.array(list(string.ascii_lowercase + string.digits))

    def texts(count):
        return ["".join(row) for row in letters[rng.integers(0, len(letters), size=(count, 12))]]

    new, earlier = texts(4096), texts(50_000)
    new_signature, earlier_signature = signatures(new, ngram=3), signatures(earlier, ngram=3)
    for earlier_count in (12_500, 50_000):
        signature = np.vstack([earlier_signature[:earlier_count], new_signature])
        i, _ = dedup._candidate_pairs(dedup._band_keys(signature, *lsh_bands(0.8), 0),
                                      earlier_count)
        assert len(i) < len(new)  # random texts: almost no candidates, never all 4096 x n pairs
    wall, cpu = time.perf_counter(), time.process_time()
    flags = near_duplicates(new, earlier, threshold=0.8, ngram=3)
    print(f"near_duplicates, 4096 new vs 50000 earlier random 12-character texts: "
          f"{time.perf_counter() - wall:.3f} s wall, {time.process_time() - cpu:.3f} s CPU")
    assert not any(flags)


def test_admit_drops_near_duplicates_and_keeps_exact_duplicates_as_duplicate():
    domain = ArithmeticDomain()
    pairs = [("<propose>L4:", text)
             for text in ["123+456", "123+457", "123+456", "37+5", "37+6", "99*", "321+655"]]

    def reasons(threshold):
        proposals, problems = admit(domain, pairs, source="proposer", seen={"321+654"},
                                    heldout=set(), run_id="r", round_index=1,
                                    near_duplicate_threshold=threshold, ngram=3)
        assert [p["text"] for p in problems] == [p["text"] for p in proposals
                                                 if p["drop_reason"] is None]
        return [p["drop_reason"] for p in proposals]

    assert reasons(0.5) == [None, "near_duplicate", "duplicate", None, None, "invalid",
                            "near_duplicate"]
    assert reasons(1.0) == [None, None, "duplicate", None, None, "invalid", None]
