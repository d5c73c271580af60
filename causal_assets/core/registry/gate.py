"""What a benchmark's `gate:` section may say: which figures of the evaluation the regression gate holds to the
accepted baseline (`core/evaluation/gate.py`). Pure data and validation, so the benchmark registry checks it when
it loads, before anything runs."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from causal_assets.core.measures.metrics import parse_metric

RANKING_METRICS = ("ndcg", "map", "mrr", "recall", "precision", "hit_rate")
DEFAULT_RETRIEVER = "bm25"   # gated where no tuned retriever was selected


class GateSpec(BaseModel):
    """`gate:` of a benchmark. A run fails the gate only where a gated figure dropped by more than `min_drop` below
    the accepted baseline's on the same questions *and* the paired randomization test gives p < `alpha`."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = True
    # the retriever (the report's row name, e.g. `hybrid` or `hybrid_tuned`); None: the tuned retriever the tuning
    # selected (`<name>_tuned`), else bm25
    retriever: str | None = None
    # metric@k; `answer_gain@k` with truth answers (nats)
    metrics: list[str] = Field(default_factory=lambda: ["ndcg@10"], min_length=1)
    truth: Literal["qrels", "mc_labels", "answers"] = "qrels"
    min_drop: float = Field(default=0.02, ge=0)    # the smallest drop of the mean that counts
    alpha: float = Field(default=0.05, gt=0, lt=1)
    split: str | None = None                       # default: the first eval split

    @field_validator("metrics")
    @classmethod
    def _metrics_known(cls, v: list[str]) -> list[str]:
        v = [n.lower() for n in v]
        for name in v:
            metric, _ = parse_metric(name)
            if metric not in (*RANKING_METRICS, "answer_gain"):
                raise ValueError(f"metric {name!r}: expected one of {', '.join(RANKING_METRICS)} or answer_gain, "
                                 "with @k")
        return v

    def checked(self, truth_metric: str) -> None:
        """ValueError where a metric does not fit the truth (answer gain is measured only against the answers)."""
        if (truth_metric == "answer_gain") != (self.truth == "answers"):
            raise ValueError(f"metric answer_gain goes with truth answers, and truth {self.truth!r} with a ranking "
                             "metric")
