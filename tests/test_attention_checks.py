"""Notebook 10's checks on their own: the inputs they build and the watch that refuses an N×M tensor.

The verdicts on answers (each slip named, right answers passed) are tests/test_mutants.py's, through the
catalogue; these hold what those rely on.
"""
import torch

from autograder.checks.nb10_attention import cases, online
from autograder.checks.op_watch import OpWatch


def test_the_watch_records_the_output_with_the_most_elements_and_its_op():
    a, b = torch.randn(6, 2), torch.randn(2, 5)
    with OpWatch() as watch:
        (a @ b).sum()
        a.expand(3, 6, 2)  # a view shows 36 elements without storage of its own: it counts as 36
    assert watch.most_elements == (36, (3, 6, 2), "aten::expand")


def test_heads_transposed_keeps_the_values_in_a_layout_of_its_own():
    case = cases.backward_case(2, 3, 5, 4, seed=1, layout="heads-transposed")
    q = cases.laid_out(case)[0]
    assert torch.equal(q, case["q"]) and not q.is_contiguous()
    assert q.transpose(1, 2).is_contiguous()  # stored as (B, N, H, d)


def test_large_logits_reach_the_size_the_battery_names():
    q, k, _ = cases.qkv(2, 2, 12, 8, seed=3, dtype=torch.float32, large_logits=True)
    largest = ((q.double() @ k.double().mT) * 8 ** -0.5).abs().max().item()
    assert abs(largest - cases.LARGE_LOGIT) < 1e-3 * cases.LARGE_LOGIT
    assert torch.exp(torch.tensor(largest, dtype=torch.float32)).isinf()


def test_the_allocation_watch_applies_only_where_n_by_m_is_more_than_the_answer_needs():
    assert online.watched_size(cases.online_case(1, 2, 80, 8, seed=1, block=16)) == 80 * 80
    assert online.watched_size(cases.online_case(2, 3, 7, 5, seed=1, block=3)) == 0  # the inputs are larger
    assert online.watched_size(cases.online_case(1, 1, 1, 4, seed=1, block=4)) == 0


def test_the_rescale_cases_put_every_rows_largest_score_in_the_first_then_the_last_tile():
    case = cases.online_case(2, 2, 9, 5, seed=4, block=4, causal=True)
    first, last = online.rescale_cases(case)
    for built, tile in ((first, 0), (last, -1)):
        assert not built["causal"] and built["k"].shape[-2] % built["block"] == 0
        scores = built["q"] @ built["k"].mT
        tiles = scores.split(built["block"], dim=-1)
        assert (tiles[tile].amax(-1) > torch.cat([t for i, t in enumerate(tiles) if t is not tiles[tile]], -1)
                .amax(-1)).all()
