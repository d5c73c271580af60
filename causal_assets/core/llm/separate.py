"""Documents encoded each on its own: the llama.cpp machinery behind ``ScoreRequest.pieces``.

A Monte Carlo question scores ~24 prompts that are the same few documents in different subsets. Jointly encoded,
each prompt pays for every document it holds (~410 tokens a prompt on HotpotQA). Encoded separately, a document's
keys and values are computed once per question, attending to the shared prefix (instructions, BOS) and to itself
only; a prompt then copies its documents' cached states into place, shifts them to their positions (RoPE) and
evaluates only the question and the answer, which attend to everything before them. This is the parallel
encoding of block-attention RAG; the documents do not see each other, only the question and the answer do, so
the values differ from a joint encoding (docs/decisions.md measures what that does to the labels).

Each value depends only on its own request (the prefix, the pieces and the suffix, each evaluated in batches
that start at its own beginning), never on the request before it.
"""
from __future__ import annotations

import ctypes
from collections import OrderedDict

import llama_cpp
import numpy as np
from llama_cpp import _internals
from llama_cpp._utils import suppress_stdout_stderr

from .logits import log_softmax_at

PREFIX, TEMP, PROMPT = 0, 1, 2    # sequence ids: the shared prefix, a piece being loaded, the prompt assembled
STEP = 128                        # tokens per decode batch
MAX_CACHED_BYTES = 512 * 2**20    # pieces' states kept (a HotpotQA question's ~1,000 tokens take ~20 MB)


class SeparateEncoder:
    """A second llama.cpp context on the scorer's model, with three sequences in one KV cache."""

    def __init__(self, model, n_ctx: int, n_threads: int):
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = STEP
        params.n_threads = params.n_threads_batch = n_threads
        params.n_seq_max = 3
        params.kv_unified = True      # one cache: sequences share the prefix's cells
        params.swa_full = True
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED   # as the joint context
        params.no_perf = True
        with suppress_stdout_stderr(disable=False):   # llama.cpp's notes on the cache, as the joint context's
            self._ctx = _internals.LlamaContext(model=model, params=params, verbose=False)
        self._mem = llama_cpp.llama_get_memory(self._ctx.ctx)
        if not llama_cpp.llama_memory_can_shift(self._mem):
            self.close()
            raise RuntimeError("this model's KV cache cannot be shifted: documents cannot be encoded separately")
        self._batch = _internals.LlamaBatch(n_tokens=STEP, embd=0, n_seq_max=3, verbose=False)
        self._n_vocab = model.n_vocab()
        self.n_ctx = n_ctx
        self._prefix: list[int] = []
        self._pieces: OrderedDict[tuple[int, ...], bytes] = OrderedDict()
        self._bytes = 0

    def set_threads(self, n: int) -> None:
        self._ctx.set_n_threads(n, n)

    def _decode(self, tokens: list[int], pos0: int, seq: int, rows: set[int]) -> dict[int, np.ndarray]:
        """Evaluate ``tokens`` at positions ``pos0``.. of ``seq``; the logits rows of ``rows`` (token indices)."""
        out = {}
        b = self._batch.batch
        for s in range(0, len(tokens), STEP):
            chunk = tokens[s:s + STEP]
            b.n_tokens = len(chunk)
            for i, t in enumerate(chunk):
                b.token[i] = t
                b.pos[i] = pos0 + s + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = seq
                b.logits[i] = (s + i) in rows
            rc = llama_cpp.llama_decode(self._ctx.ctx, b)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            for i in range(len(chunk)):
                if s + i in rows:
                    ptr = llama_cpp.llama_get_logits_ith(self._ctx.ctx, i)
                    out[s + i] = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                                       shape=(self._n_vocab,)).copy()
        return out

    def _use_prefix(self, prefix: list[int]) -> int:
        """Make ``prefix`` the shared prefix; the tokens evaluated for it (0 when it already was)."""
        if prefix == self._prefix:
            return 0
        llama_cpp.llama_memory_clear(self._mem, True)
        self._pieces.clear()
        self._bytes = 0
        self._prefix = []
        self._decode(prefix, 0, PREFIX, set())
        self._prefix = list(prefix)
        return len(prefix)

    def _piece_state(self, piece: tuple[int, ...]) -> tuple[bytes, int]:
        """The piece's cached state (encoded after the prefix, at the prefix's end), and the tokens evaluated."""
        state = self._pieces.get(piece)
        if state is not None:
            self._pieces.move_to_end(piece)
            return state, 0
        n = len(self._prefix)
        llama_cpp.llama_memory_seq_cp(self._mem, PREFIX, TEMP, 0, n)
        self._decode(list(piece), n, TEMP, set())
        llama_cpp.llama_memory_seq_rm(self._mem, TEMP, 0, n)       # the piece's cells only
        size = llama_cpp.llama_state_seq_get_size(self._ctx.ctx, TEMP)
        buf = (ctypes.c_ubyte * size)()
        got = llama_cpp.llama_state_seq_get_data(self._ctx.ctx, buf, size, TEMP)
        llama_cpp.llama_memory_seq_rm(self._mem, TEMP, -1, -1)
        state = bytes(buf[:got])
        self._pieces[piece] = state
        self._bytes += len(state)
        while self._bytes > MAX_CACHED_BYTES and len(self._pieces) > 1:
            _, old = self._pieces.popitem(last=False)
            self._bytes -= len(old)
        return state, len(piece)

    def score(self, prefix: list[int], pieces: list[list[int]], suffix: list[int], targets: list[list[int]],
              extra_rows: list[int]) -> tuple[list[float], int, dict[int, float]]:
        """Each target's log-probability after prefix + pieces + suffix, the tokens evaluated, and the
        log-probability of the next suffix token at each of ``extra_rows`` (suffix token indices)."""
        total = len(prefix) + sum(map(len, pieces)) + len(suffix) + max(map(len, targets))
        if total > self.n_ctx:
            raise ValueError(f"prompt of {total} tokens exceeds the context of {self.n_ctx}")
        evaluated = self._use_prefix(prefix)
        states = []
        for piece in pieces:
            state, ev = self._piece_state(tuple(piece))
            states.append(state)
            evaluated += ev
        n = len(prefix)
        llama_cpp.llama_memory_seq_rm(self._mem, PROMPT, -1, -1)
        llama_cpp.llama_memory_seq_cp(self._mem, PREFIX, PROMPT, 0, n)
        at = n
        try:
            for state, piece in zip(states, pieces):
                buf = (ctypes.c_ubyte * len(state)).from_buffer_copy(state)
                if not llama_cpp.llama_state_seq_set_data(self._ctx.ctx, buf, len(state), TEMP):
                    raise RuntimeError("llama.cpp could not load a document's state (KV cache full)")
                if at != n:
                    llama_cpp.llama_memory_seq_add(self._mem, TEMP, n, -1, at - n)
                llama_cpp.llama_memory_seq_cp(self._mem, TEMP, PROMPT, -1, -1)
                llama_cpp.llama_memory_seq_rm(self._mem, TEMP, -1, -1)
                at += len(piece)
            rows = set(extra_rows) | {len(suffix) - 1}
            logits = self._decode(suffix, at, PROMPT, rows)
            evaluated += len(suffix)
            at_rows = {r: log_softmax_at(logits[r], suffix[r + 1]) for r in extra_rows}
            after = at + len(suffix)
            lps = []
            for target in targets:
                lp = log_softmax_at(logits[len(suffix) - 1], target[0])
                if len(target) > 1:
                    more = self._decode(target[:-1], after, PROMPT, set(range(len(target) - 1)))
                    lp += sum(log_softmax_at(more[i], target[i + 1]) for i in range(len(target) - 1))
                    evaluated += len(target) - 1
                    llama_cpp.llama_memory_seq_rm(self._mem, PROMPT, after, -1)
                lps.append(float(lp))
        finally:
            llama_cpp.llama_memory_seq_rm(self._mem, PROMPT, -1, -1)
            llama_cpp.llama_memory_seq_rm(self._mem, TEMP, -1, -1)
        return lps, evaluated, at_rows

    def close(self) -> None:
        self._batch.close()
        self._ctx.close()

