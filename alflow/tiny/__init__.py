"""The tiny engine: a small real language model on CPU with real n-gram speculative decoding.

:mod:`alflow.tiny.engine` owns the decode loop on llama.cpp (through ``llama-cpp-python``): n-gram
(prompt-lookup) drafting, one forward pass over the last token and the K drafts, exact speculative
sampling, KV-cache rollback, vLLM-style synthetic acceptance, and per-step counters. It needs the
optional extra ``alflow[tiny]`` (``pip install 'alflow[tiny]'`` or ``bash scripts/setup.sh --tiny``);
importing :mod:`alflow.tiny.engine` without it raises :class:`alflow.tiny.errors.TinyUnavailableError`
naming the extra. This package itself imports nothing heavy.
"""
