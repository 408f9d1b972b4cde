"""The tiny server (``python -m alflow.tiny serve``) refusing bad settings before loading the model; it starts processes."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--k", "17"], "--k 17"),
        (["--speculative-config", '{"method":"mtp","num_speculative_tokens":2}'], "n-gram lookup only"),
        (["--synthetic-rates", "1,0.5", "--k", "3"], "synthetic"),
        (["--n-ctx", "8"], "--n-ctx 8"),
    ],
)
def test_tiny_serve_refuses_bad_settings_before_loading_the_model(args: list[str], words: str) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "alflow.tiny", "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert words in done.stderr
    assert done.stdout == ""
