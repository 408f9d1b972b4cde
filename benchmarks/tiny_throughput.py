"""Benchmark of the tiny engine (a script, not a test): tokens/s plain vs n-gram drafting, with AL.

For each prompt kind (coding: edit/repeat code, so n-gram lookup finds the continuation; writing:
free text) the same requests run plain (no drafting) and with drafting (K=3 by default), in
alternation, with fixed seeds. Tokens/s = generated tokens / wall time of the decode (prefill
included); AL = 1 + accepted / draft steps from the engine's own per-step counters. The default
sampling is the issue's: temperature 0.8, top-k 40 (greedy loops on creative prompts).

Usage: .venv/bin/python benchmarks/tiny_throughput.py [--k 3] [--max-tokens 128] [--repeats 2]
       [--temperature 0.8] [--top-k 40] [--threads N] [--model PATH]
"""

from __future__ import annotations

import argparse
import time

from alflow.tiny.engine import SpecSettings, TinyEngine

CODING = (
    "Rename the variable `total` to `acc` everywhere in this function and print the whole result.\n\n"
    "def sum_list(values):\n    total = 0\n    for v in values:\n        total = total + v\n"
    "    if total > 100:\n        total = 100\n    return total\n\nResult:\n\ndef sum_list(values):\n",
    "Add type hints to this Python code and output the full code.\n\n"
    "def area(width, height):\n    return width * height\n\n"
    "def perimeter(width, height):\n    return 2 * (width + height)\n\n"
    "def describe(width, height):\n    a = area(width, height)\n    p = perimeter(width, height)\n"
    "    return f'area={a} perimeter={p}'\n\nWith type hints:\n\ndef area(",
    "Convert this JavaScript to TypeScript, keeping everything else identical.\n\n"
    "function greet(name, times) {\n  let out = [];\n  for (let i = 0; i < times; i++) {\n"
    "    out.push('Hello, ' + name + '!');\n  }\n  return out.join('\\n');\n}\n\n"
    "TypeScript:\n\nfunction greet(",
)
WRITING = (
    "Write a short poem about the sea at night, full of unusual images.\n\n",
    "Tell a short story about a fox who learns to paint, in your own words.\n\n",
    "Write a letter to a friend describing your first day in a new city.\n\n",
)


def _one(
    engine: TinyEngine, prompt: list[int], spec: SpecSettings | None, seed: int, args: argparse.Namespace
):
    start = time.perf_counter()
    tokens = steps = accepted = 0
    for event in engine.generate(
        prompt,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        seed=seed,
        spec=spec,
    ):
        tokens += len(event.tokens)
        if event.drafted:
            steps += 1
            accepted += event.accepted
    return tokens, time.perf_counter() - start, steps, accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2, help="seeds per prompt")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=40)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()

    engine = TinyEngine.load(args.model, n_threads=args.threads)
    print(
        f"model {engine.model_name}, {engine.n_threads} thread(s), K={args.k}, max_tokens={args.max_tokens}, "
        f"temperature={args.temperature}, top_k={args.top_k}, {args.repeats} seed(s) per prompt"
    )
    warm = engine.tokenize(WRITING[0])
    list(engine.generate(warm, max_tokens=8))
    rows = []
    for kind, prompts in (("coding", CODING), ("writing", WRITING)):
        totals = {"plain": [0, 0.0, 0, 0], f"ngram K={args.k}": [0, 0.0, 0, 0]}
        for text in prompts:
            prompt = engine.tokenize(text)
            for seed in range(args.repeats):
                for mode, spec in (("plain", None), (f"ngram K={args.k}", SpecSettings(k=args.k))):
                    list(engine.generate(prompt[:-1], max_tokens=1))  # same cache state for both modes
                    tokens, secs, steps, acc = _one(engine, prompt, spec, seed, args)
                    t = totals[mode]
                    t[0] += tokens
                    t[1] += secs
                    t[2] += steps
                    t[3] += acc
        plain_rate = totals["plain"][0] / totals["plain"][1]
        for mode, (tokens, secs, steps, acc) in totals.items():
            rate = tokens / secs
            al = f"{1 + acc / steps:.2f}" if steps else "-"
            rows.append(
                (kind, mode, tokens, f"{secs:.1f}", f"{rate:.1f}", al, steps, f"{rate / plain_rate:.2f}x")
            )

    header = ("prompts", "mode", "tokens", "seconds", "tokens/s", "AL", "draft steps", "speed-up")
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    engine.close()


if __name__ == "__main__":
    main()
