"""Exact dense top-k for one query at a time, fast: a certified int8 scan, then exact float re-scoring.

One query against n float32 vectors is bound by memory bandwidth, and numpy's BLAS wakes all its threads for it.
So `single_thread_blas()` keeps a few queries on one thread, and `Int8Scan` (from `INT8_SCAN_MIN` chunks) multiplies
8-bit codes of the vectors (stored as uint8 with zero point 128: exact on every CPU) by the quantized query in one
`MatMulInteger`. Every vector whose approximate score is within twice the largest proven error bound of the k-th
best is re-scored in float32, so the result is the exact top k; when the bound admits too many candidates the scan
falls back to the float product. See docs/pipeline.md ("Corpus index") and docs/decisions.md.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from threadpoolctl import ThreadpoolController

INT8_SCAN_MIN = 20_000       # below this a float product on one thread takes ~1-2 ms: no scan index
SAMPLE_STRIDE = 8           # the candidate cut is found on every 8th approximate score
MAX_CANDIDATE_SHARE = 0.25   # more candidates than this share of the corpus: re-score everything instead
CODE_ZERO = 128             # zero point of the uint8-stored codes (see the module doc)


@lru_cache(maxsize=1)
def _controller():
    return ThreadpoolController()


def single_thread_blas():
    """Context manager: BLAS (numpy's OpenBLAS/MKL) on one thread inside the block."""
    return _controller().limit(limits=1, user_api="blas")


def top_positions(scores: np.ndarray, k: int, positions: np.ndarray | None = None) -> np.ndarray:
    """Positions of the k highest scores, best first, ties by position; `positions` maps score indexes to corpus
    positions (default: identity)."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, np.int64)
    pos = np.arange(len(scores)) if positions is None else positions
    part = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    return pos[part[np.lexsort((pos[part], -scores[part]))]]


class Int8Scan:
    """int8 codes of the (L2-normalised) vectors with the error terms that make the scan exact; see the module doc."""

    def __init__(self, vectors: np.ndarray):
        # optional heavy dependencies: ONNX Runtime and onnx load only when a corpus is large enough to scan
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        self.vectors = vectors
        n, dim = vectors.shape
        absmax = np.abs(vectors).max(axis=1)
        self.scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
        codes = np.clip(np.rint(vectors / self.scale[:, None]), -127, 127).astype(np.int16)
        decoded = codes.astype(np.float32) * self.scale[:, None]
        # Bounds of the error terms over the whole corpus (one number each keeps the candidate test one pass).
        self.max_code_error = float(np.linalg.norm(vectors - decoded, axis=1).max())
        self.max_decoded_norm = float(np.linalg.norm(decoded, axis=1).max())
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["q", "codes", "q_zero", "codes_zero"], ["dots"])], "int8_scan",
            [helper.make_tensor_value_info("q", TensorProto.UINT8, [None, dim]),
             helper.make_tensor_value_info("q_zero", TensorProto.UINT8, [])],
            [helper.make_tensor_value_info("dots", TensorProto.INT32, [None, n])],
            initializer=[numpy_helper.from_array(np.ascontiguousarray((codes + CODE_ZERO).astype(np.uint8).T), "codes"),
                         numpy_helper.from_array(np.array(CODE_ZERO, np.uint8), "codes_zero")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        self.stats = {"candidates": 0, "queries": 0, "fallbacks": 0}

    @property
    def nbytes(self) -> int:
        return int(self.vectors.shape[0] * (self.vectors.shape[1] + 4))

    def approximate(self, query: np.ndarray) -> tuple[np.ndarray, float]:
        """(approximate scores of every vector, bound on |exact - approximate| for every vector)."""
        lo, hi = min(float(query.min()), 0.0), max(float(query.max()), 0.0)
        step = (hi - lo) / 255.0 or 1.0
        zero = int(np.clip(np.rint(-lo / step), 0, 255))
        q8 = np.clip(np.rint(query / step) + zero, 0, 255).astype(np.uint8)
        dots = self.session.run(None, {"q": q8[None], "q_zero": np.array(zero, np.uint8)})[0][0]
        approx = dots.astype(np.float32) * (self.scale * np.float32(step))
        q_error = float(np.linalg.norm(query - (q8.astype(np.float32) - zero) * step))
        bound = q_error * self.max_decoded_norm + float(np.linalg.norm(query)) * self.max_code_error
        return approx, bound * (1 + 1e-5) + 1e-6  # float32 rounding of the scaling, on the safe side

    def top_k(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The exact top k of one query: (positions, float32 cosines), best first, ties by position."""
        query = np.ascontiguousarray(query, dtype=np.float32)
        n = len(self.vectors)
        k = min(k, n)
        approx, bound = self.approximate(query)
        # Any value at most the k-th best approximate score will do as the cut (more candidates, same result):
        # the k-th best of every 8th score is one, found in an eighth of the time of a full partition.
        sample = approx[::SAMPLE_STRIDE] if n >= SAMPLE_STRIDE * k else approx
        kth = np.partition(sample, len(sample) - k)[len(sample) - k]
        cand = np.flatnonzero(approx >= kth - 2 * bound)
        self.stats["queries"] += 1
        self.stats["candidates"] += len(cand)
        if len(cand) > MAX_CANDIDATE_SHARE * n:
            self.stats["fallbacks"] += 1
            with single_thread_blas():
                scores = self.vectors @ query
            top = top_positions(scores, k)
            return top, scores[top]
        exact = self.vectors[cand] @ query
        top = top_positions(exact, k, cand)
        return top, exact[np.searchsorted(cand, top)]
