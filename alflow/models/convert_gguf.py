"""Convert a GGUF file into a Hugging Face folder (bf16 safetensors + tokenizer with chat template).

A standalone script (no alflow import): ``alflow models prepare`` runs it with the interpreter of the
vLLM environment, which holds torch, transformers, gguf and accelerate, so alflow's own environment
stays lean. Prints one JSON line with the versions that did the conversion.

    python convert_gguf.py GGUF_FILE OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """Convert ``argv[0]`` (a .gguf file) into the folder ``argv[1]``; print the conversion as JSON."""
    if len(argv) != 2:
        sys.stderr.write("usage: convert_gguf.py GGUF_FILE OUT_DIR\n")
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = Path(argv[0])
    out = Path(argv[1])
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # dequantize=True: save_pretrained refuses a GGUF-quantized model
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent),
        gguf_file=gguf.name,
        quantization_config=GgufConfig(dequantize=True),
        dtype=torch.bfloat16,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {
        "tool": "transformers",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "dtype": "bfloat16",
        "dequantize": True,
        "architecture": type(model).__name__,
        "vocab_size": len(tokenizer),
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
    }
    sys.stdout.write(json.dumps(info) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
