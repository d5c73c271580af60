"""Answer normalisation and token F1, as HotpotQA's official `hotpot_evaluate_v1.py` computes them: the labelling's
validators grade answers with them, and the causal retriever compares two answers of its answer model with them."""
from __future__ import annotations

import re
import string
from collections import Counter

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(s: str) -> str:
    """HotpotQA's official normalisation: lower, remove punctuation, remove articles, fix whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def f1_precision_recall(prediction: str, ground_truth: str) -> tuple[float, float, float]:
    """``f1_score`` of hotpot_evaluate_v1.py, returning (f1, precision, recall)."""
    norm_pred = normalize_answer(prediction)
    norm_gold = normalize_answer(ground_truth)
    zero = (0.0, 0.0, 0.0)
    if norm_pred in _SPECIAL and norm_pred != norm_gold:
        return zero
    if norm_gold in _SPECIAL and norm_pred != norm_gold:
        return zero
    pred_tokens = norm_pred.split()
    gold_tokens = norm_gold.split()
    num_same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if num_same == 0:
        return zero
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall
