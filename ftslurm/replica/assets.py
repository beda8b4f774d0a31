"""Tokenizer and dataset assets: the real Llama-3.1-8B tokenizer, or tiny local stand-ins.

- `download_tokenizer`: the three tokenizer files of the gated meta-llama/Llama-3.1-8B repo
  into assets/hf/Llama-3.1-8B (torchtitan 0.2.2 needs tokenizer.json + tokenizer_config.json;
  original/tokenizer.model alone is not enough). huggingface_hub is imported only here.
- `make_local`: a byte-level BPE tokenizer (vocab < 2048, the debug model's vocab size) and a
  JSON-lines dataset built from this Python's own standard-library sources, so CPU runs and
  tests never touch the network and get the same data on every run.
"""

from __future__ import annotations

import json
import os
import socket
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ftslurm import safefile
from ftslurm.errors import UserError

HF_REPO = "meta-llama/Llama-3.1-8B"
HF_FILES = ("tokenizer.json", "tokenizer_config.json", "original/tokenizer.model")
BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
LOCAL_VOCAB = 2000  # < 2048: ids must fit the debug model's embedding
DOC_CHARS = 2000
DATASET_CHARS = 3_000_000


def download_tokenizer(
    dest: Path,
    token: str | None,
    repo_id: str = HF_REPO,
    hub_download: Callable[..., Any] | None = None,
) -> list[Path]:
    """Fetch the tokenizer files; errors become one-line UserErrors that never echo the token.

    `hub_download` defaults to huggingface_hub.hf_hub_download (tests pass a fake).
    """
    if not token:
        raise UserError(
            "no Hugging Face token: set HF_TOKEN or pass --token-file FILE (and accept the "
            f"licence at https://huggingface.co/{repo_id} with that account first)"
        )
    real_hub = hub_download is None
    if hub_download is None:
        try:
            from huggingface_hub import hf_hub_download as hub_download
        except ImportError as e:
            raise UserError("huggingface_hub is not installed: pip install huggingface_hub") from e
    _make_dirs(dest)
    if real_hub:
        _check_hub_resolves(os.environ, dest)
    got = []
    for name in HF_FILES:
        try:
            path = hub_download(repo_id=repo_id, filename=name, local_dir=dest, token=token)
        except Exception as e:  # noqa: BLE001 - classified below, re-raised otherwise
            raise _hub_error(e, repo_id, name) from None
        got.append(Path(path))
    return got


_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def _check_hub_resolves(env: Mapping[str, str], dest: Path) -> None:
    """Fail in a moment when the Hub's name does not resolve: huggingface_hub retries any
    connection error 5 times ('Retrying in 8s [Retry 4/5]', ~24 s) before giving up. Behind a
    proxy the proxy resolves names, and HF_HUB_OFFLINE reads the cache only: nothing to check."""
    endpoint = env.get("HF_ENDPOINT") or "https://huggingface.co"
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"HF_ENDPOINT={endpoint!r} is not a URL: unset it, or give "
                        "https://<host> of your Hub mirror")
    if any(env.get(v) for v in _PROXY_VARS) or env.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return
    host = parts.hostname
    try:
        socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise UserError(
            f"cannot resolve {host} ({e.strerror}): no network or DNS on this machine; set "
            f"HTTPS_PROXY if it needs a proxy, or copy the tokenizer files into {dest} by hand"
        ) from None


def _make_dirs(*dirs: Path) -> None:
    for d in dirs:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # a file in the way, no permission, read-only file system
            raise UserError(f"cannot create the folder {d} ({e.strerror}): choose --dest") from None


def _hub_error(e: Exception, repo_id: str, name: str) -> Exception:
    kinds = {cls.__name__ for cls in type(e).__mro__}
    status = getattr(getattr(e, "response", None), "status_code", None)
    url = f"https://huggingface.co/{repo_id}"
    if "GatedRepoError" in kinds:
        return UserError(
            f"{repo_id} is gated and this token has no access: accept the licence at {url} "
            "(logged in as the token's owner), wait for approval, then retry"
        )
    if status == 401:
        return UserError(
            "Hugging Face rejected the token (401): create a read token at "
            "https://huggingface.co/settings/tokens and set HF_TOKEN"
        )
    if "RepositoryNotFoundError" in kinds:
        return UserError(
            f"{repo_id} was not found or is not visible to this token: check the name and "
            f"accept the licence at {url}"
        )
    # LocalEntryNotFoundError (a subclass of EntryNotFoundError): the Hub could not be reached
    # and the file is not in the local cache -- no network, not a missing file
    offline = "LocalEntryNotFoundError" in kinds
    if not offline and ("EntryNotFoundError" in kinds or "RemoteEntryNotFoundError" in kinds):
        return UserError(f"{name} is missing from {repo_id}; check the repository revision")
    if offline or isinstance(e, OSError) or "ConnectError" in kinds or "TimeoutException" in kinds:
        return UserError(
            f"cannot download {name} from huggingface.co ({type(e).__name__}); check the "
            "network or a proxy (HTTPS_PROXY), or copy the files into the folder by hand"
        )
    return e


def stdlib_texts(limit_chars: int = DATASET_CHARS) -> Iterator[str]:
    """Deterministic text: this Python's stdlib .py files in sorted order, cut into documents."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for start in range(0, len(text), DOC_CHARS):
            doc = text[start : start + DOC_CHARS]
            if not doc.strip():
                continue
            yield doc
            total += len(doc)
            if total >= limit_chars:
                return


def make_local(base: Path, limit_chars: int = DATASET_CHARS) -> tuple[Path, Path]:
    """Build `<base>/dataset/data.jsonl` and `<base>/tokenizer/{tokenizer,tokenizer_config}.json`.

    Returns (tokenizer dir, dataset dir). Takes a few seconds; safe to re-run (overwrites).
    """
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one BPE trainer thread: same merges
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError as e:
        raise UserError("the tokenizers package is missing: pip install 'ftslurm[cpu]'") from e
    tok_dir, data_dir = base / "tokenizer", base / "dataset"
    _make_dirs(tok_dir, data_dir)
    docs = list(stdlib_texts(limit_chars))
    if not docs:
        raise UserError("found no standard-library sources to build a dataset from")
    # every file is written whole under a fresh private name and renamed into place
    # (safefile.write_atomic): a reader never sees half a file, and a link planted at a fixed
    # temporary name (`data.jsonl.tmp`) cannot make this overwrite the file it points at
    safefile.write_atomic(data_dir / "data.jsonl", "".join(
        json.dumps({"text": doc}, ensure_ascii=False) + "\n" for doc in docs), mode=0o644)

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=LOCAL_VOCAB,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(docs, trainer)
    safefile.write_atomic(tok_dir / "tokenizer.json", tokenizer.to_str(pretty=True), mode=0o644)
    config = {
        "bos_token": BOS,
        "eos_token": EOS,
        "add_bos_token": True,
        "add_eos_token": False,
        "model_max_length": 1_000_000,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    # written last: its presence says the assets are complete (job._ensure_cpu_assets)
    safefile.write_atomic(tok_dir / "tokenizer_config.json", json.dumps(config, indent=2) + "\n",
                          mode=0o644)  # fmt: skip
    return tok_dir, data_dir
