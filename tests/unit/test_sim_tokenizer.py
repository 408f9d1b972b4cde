"""The sim's own tokenizer: deterministic, reversible, no download."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alflow.errors import InvalidInputError
from alflow.sim.tokenizer import Tokenizer, get_tokenizer

pytestmark = pytest.mark.unit


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_round_trip_any_text(text: str) -> None:
    tk = get_tokenizer()
    ids = tk.encode(text)
    assert tk.decode(ids) == text
    assert tk.count(text) == len(ids)


def test_deterministic_across_instances_and_compact() -> None:
    text = "def solve(x):\n    return x + 1  # The answer is 42.\nJanet sells the remaining eggs."
    a, b = Tokenizer(), Tokenizer()
    assert a.encode(text) == b.encode(text)
    assert a.vocab_size == b.vocab_size > 20_000
    assert len(text) / len(a.encode(text)) > 2.0  # words, not bytes


def test_special_tokens_are_not_produced_by_text() -> None:
    tk = get_tokenizer()
    ids = tk.encode("<|eot_id|>")
    assert tk.eot_id not in ids
    assert tk.decode(ids) == "<|eot_id|>"


def test_chat_template_and_special_skip() -> None:
    tk = get_tokenizer()
    ids = tk.chat_ids([("user", "hi")])
    assert ids[0] == tk.bos_id
    assert tk.decode(ids, skip_special_tokens=True) == "user\n\nhiassistant\n\n"


@pytest.mark.parametrize("bad", [-1, 10**9, 1.5, "3", True])
def test_check_ids_rejects_bad_ids(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="vocabulary"):
        get_tokenizer().check_ids([1, bad])
