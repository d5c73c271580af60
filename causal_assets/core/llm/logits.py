"""Reading a llama.cpp logits row: the log-probability of one token under the row's softmax."""
from __future__ import annotations

import math

import numpy as np


def log_softmax_at(logits: np.ndarray, token: int) -> float:
    m = float(logits.max())
    return float(logits[token] - m - math.log(float(np.exp(logits - m).sum())))
