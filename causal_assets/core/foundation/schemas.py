"""What each stored column means: shown in the Dagster UI (each asset's column schema) and as column comments of the
DuckDB catalog's views (`select column_name, comment from duckdb_columns() where table_name = 'mc_labels'`).

Ids: one name per concept, in the files and the views alike. A corpus document is a chunk, `chunk_id` in every
table; a question is `query_id`; so any two views join on `chunk_id` and `query_id`. Files written by earlier
versions under other names are read under these (`storage.RENAMED_COLUMNS`).
"""
from __future__ import annotations

# The effect size labelled documents are ranked by (label quality's top-2 / AUC, graded label truth, the learned
# model's effect target): a document's effect averaged over the random subsets of the others. The label itself is
# decided by `effect`, measured in the document's context (with the partners an interaction showed); ranking by
# that context effect lets a spurious interaction among 24 trials lift a distractor. Chosen on HotpotQA's train
# half (top-2 0.830 vs 0.791, benchmarks/label_quality.py --reanalyze). Older tables fall back to `effect`/`delta_p`.
RANKING_EFFECTS = ("average_effect", "effect", "delta_p")


def ranking_effect(labels):
    """The effect size each row of a label table (a DataFrame) is ranked by (see RANKING_EFFECTS), as floats: the
    first of those columns the table has, a missing value (a document that never varied) taken from the next."""
    cols = [c for c in RANKING_EFFECTS if c in labels.columns]
    if not cols:
        raise ValueError(f"label table has none of the effect columns {RANKING_EFFECTS}: {list(labels.columns)}")
    out = labels[cols[0]].astype(float)
    for c in cols[1:]:
        out = out.fillna(labels[c].astype(float))
    return out


COMMON = {
    "corpus": "Corpus partition the row belongs to (a name from the corpus registry).",
    "benchmark": "Benchmark partition the row belongs to (a name from the benchmark registry).",
    "chunk_id": "Id of a corpus chunk (a document, paragraph or code symbol); joins corpus_chunks.chunk_id.",
    "chunk_idx": "Row number of the chunk in its corpus (0-based), the position used by the sparse and dense index.",
    "query_id": "Id of a question: a benchmark query id, or a submitted question's id (hash_time_random).",
    "question": "The question text.",
    "query": "The question or query text.",
    "split": "Benchmark split (dev, train, test) the question belongs to.",
    "retriever": "Retriever name; `<name>_tuned` is the tuned configuration of that retriever.",
    "rank": "Rank in the result list, 1 = best.",
    "score": "Retrieval score (higher is better; scale depends on the retriever).",
    "title": "Title of the chunk (paragraph title, or the code symbol's full name).",
    "text": "Text of the chunk as indexed.",
    "kind": "Kind of chunk: paragraph, document, module, class, function, method or file.",
    "content_hash": "SHA-256 of the text: what the embedding cache is keyed by.",
    "embedding": "L2-normalised MiniLM vector (384 floats).",
    "model": "Embedding or language model that produced the row.",
    "weight": "Weight: a BM25/TF-IDF term weight, or an edge's occurrence count.",
    "method": "Sparse scoring method: bm25 or tfidf.",
    "term_id": "Id of an index term; joins sparse_vocabulary.term_id (same corpus and method).",
    "build_id": "Id of the index build; postings and vocabulary of one build share it.",
    "chunks_fingerprint": "Fingerprint of the corpus_chunks table the row was built from (in corpus_chunks: of "
                          "itself); an index part recording another is refused when loaded and rebuilt by "
                          "`causal-assets build`.",
    "label": "Monte Carlo label: YES (the document measurably helps answer), NO or UNCERTAIN.",
    "effect": "Estimated effect of including the document on the solver's outcome (nats for likelihood outcomes).",
    "ci_low": "Lower end of the effect's confidence interval.",
    "ci_high": "Upper end of the effect's confidence interval.",
    "origin": "Why the document is in the candidate pool: seed (gold), seed_neighbor (its graph neighbour), top_candidate (the retrievers' top hits), hard_negative (top hits that are not gold), random.",
    "metric": "Metric name (ndcg, map, mrr, recall, precision, hit_rate; answer_gain, answer_score and "
              "answer_passed for truth answers).",
    "k": "Cut-off of the metric (metric@k).",
    "value": "Metric value: in [0, 1] for the ranking metrics and the answers' verdicts; for answer_gain the mean "
             "gain over questions in nats (either sign).",
    "truth": "What the metric is measured against: qrels (the benchmark's judgements), mc_labels, or answers (the "
             "solver's log-likelihood of the gold answer given the top k: evaluation_answers).",
    "bucket": "Failure bucket: vocabulary_mismatch, specificity_gap, distractor_overlap or other.",
    "relevance": "Relevance grade of the judgement (0 = not relevant).",
    "response": "The answer given to the user.",
}

PER_ASSET = {
    "corpus_chunks": {"source": "Where the chunk was read from (package, file or dataset).",
                      "path": "File path of the chunk's source, when it has one.",
                      "start_line": "First source line of a code chunk.", "end_line": "Last source line.",
                      "metadata": "JSON with loader-specific fields (e.g. HotpotQA's supporting flag).",
                      "index_options": "JSON: how the corpus is analysed (e.g. split_identifiers).",
                      "source_fingerprint": "JSON: the state of the corpus's source when it was read (stat and "
                                            "content digests, file count), which search, ask, build and label "
                                            "compare with the source now."},
    "sparse_vocabulary": {"term": "The index term (stemmed; identifiers split for code corpora).",
                          "df": "Number of chunks containing the term.", "idf": "Inverse document frequency."},
    "graph_nodes": {"node_id": "Node id: a code symbol's full name, or chunk:/entity:/community: + key.",
                    "node_type": "module, class, function, method, part (a long unit's later part), external, chunk, "
                                 "entity or community.",
                    "name": "Display name of the node.", "description": "Docstring line, signature or extracted description.",
                    "rank": "Degree of the node (entities: number of co-mentioned entities).",
                    "community": "Louvain community id, -1 when none.",
                    "attributes": "JSON with kind-specific fields (module, path, lines, signature)."},
    "graph_edges": {"source": "node_id of the edge's source.", "target": "node_id of the edge's target.",
                    "edge_type": "defines, imports, calls, inherits, references, has_part, mentions, related, "
                                 "title_mention, in_community.",
                    "evidence": "The source line or sentence the edge was read from."},
    "graph_entity_embeddings": {"node_id": "The entity's node id (graph_nodes.node_id)."},
    "evaluation_runs": {"score": "The retriever's score for the document."},
    "evaluation_failures": {"rule": "The bucket's rule, as printed in the report.",
                            "detail": "Why this query landed in its bucket (terms, overlaps)."},
    "evaluation_queries": {"text": "The question text."},
    "evaluation_qrels": {"relevance": "Relevance grade from the benchmark's judgements (qrels)."},
    "evaluation_answers": {
        "retriever": "Retriever name (`<name>_tuned`: its tuned configuration), or a reference: @gold (the relevant "
                     "documents first), @labels (the pool by Monte Carlo label effect), @random (random candidates).",
        "k": "Top documents of the ranking shown to the solver, in rank order.",
        "loglik": "The solver's log-likelihood (nats) of the gold answer (best of its accepted answers) given the "
                  "top k documents, cut as the labels cut them, in the labels' prompt.",
        "loglik_no_context": "The same with no document (one per question, shared by its rows).",
        "answer_gain": "loglik - loglik_no_context, in nats: how much likelier the top k make the right answer.",
        "n_docs": "Documents actually shown (fewer than k where the ranking is shorter).",
        "answer_score": "Where the solver generates (answers.verdicts): the validator's score of its greedy answer "
                        "given the top k (token F1 for answer_f1, 1 or 0 for the others); NaN where it does not.",
        "answer_passed": "Where the solver generates: 1 when the validator accepts its greedy answer given the top "
                         "k, else 0; NaN where it does not."},
    "evaluation_per_query": {
        "text": "The question text.",
        "gold_ranks": "Rank of each gold document (the benchmark's judgements) in the retriever's top 100, best first; "
                      "0: not in it.",
        "yes_ranks": "Rank of each YES document (Monte Carlo labels) in the retriever's top 100, best first; 0: not "
                     "in it.",
        "ndcg_10": "nDCG@10 of the question against the judgements (NaN: no gold document).",
        "recall_10": "Recall@10 against the judgements.", "mrr_10": "MRR@10 against the judgements.",
        "labels_ndcg_10": "nDCG@10 against the YES labels (NaN: no YES label).",
        "answer_gain": "Answer gain in nats at answer_k (evaluation_answers; NaN where not measured).",
        "answer_k": "The k of answer_gain: the largest k measured.",
        "bucket": "Failure bucket of a miss (none: a relevant document in the top 10; empty: no gold)."},
    "evaluation_history": {
        "value": "The question's metric value in that run (answer_gain: nats).",
        "run_id": "The Dagster run of the evaluation.",
        "config_version": "The tuned configuration the run evaluated (empty: none).",
        "evaluated_at": "When the run evaluated (Unix seconds)."},
    "evaluation_baselines": {
        "value": "The question's metric value in the accepted run.",
        "run_id": "The Dagster run accepted as the baseline.",
        "config_version": "The tuned configuration that run evaluated.",
        "evaluated_at": "When that run evaluated (Unix seconds).",
        "accepted_at": "When it was accepted (Unix seconds)."},
    "cost_ledger": {
        "stage": "The stage: mc_trials (labels), tuned_retriever_configs (tuning) or evaluation.",
        "run_id": "The Dagster run.", "model": "The model called (empty: no call).",
        "calls_paid": "LLM calls made (journalled ok in the call cache).",
        "calls_cached": "Calls answered from the call cache (nothing paid).",
        "calls_errored": "Calls that failed (journalled, never an answer).",
        "prompt_tokens": "Prompt tokens of the paid calls.", "completion_tokens": "Completion tokens of the paid calls.",
        "cached_prompt_tokens": "Prompt tokens of the calls taken from the cache.",
        "call_seconds": "Seconds inside the paid and errored calls.",
        "wall_seconds": "Wall seconds of the stage.", "cpu_seconds": "CPU seconds of the stage's process.",
        "started_at": "When the stage started (Unix seconds)."},
    "mc_labels": {"average_effect": "Effect of including the document averaged over the random subsets of the others "
                                    "(no interaction context): the effect size labelled documents are ranked by.",
                  "outcome": "What a trial measured: qa_likelihood, likelihood or success.",
                  "delta_p": "Difference of success rates with and without the document (success outcomes).",
                  "trials_used": "Solver trials the label is estimated from.",
                  "estimator": "regression, adaptive or naive (the simple rule on the same trials).",
                  "base_outcome": "Mean outcome over trials.", "mean_outcome": "Mean outcome with the document.",
                  "partners": "JSON list of the YES documents beside which this one was labelled YES ([]: on its "
                              "own): a bridge document that helps only together with them.",
                  "effect_beside_yes": "Effect in the trials that hold every document YES on its own (NaN: not "
                                       "measured), with its interval in beside_yes_ci_low / beside_yes_ci_high.",
                  "beside_yes_ci_low": "Lower end of effect_beside_yes's interval.",
                  "beside_yes_ci_high": "Upper end of effect_beside_yes's interval."},
    "candidate_pools": {"answer": "The gold answer.", "aliases": "Accepted answer spellings (JSON).",
                        "position": "Position of the document in the shuffled pool.",
                        "path": "The document's file, relative to the corpus's root (folder and package corpora; "
                                "empty for the others).",
                        "text": "What the solver reads of the document: all of it where it fits its share of the "
                                "solver's context, else the lines that best match the question.",
                        "doc_chars": "The document's length in characters.",
                        "kept_start": "First character of the document the solver reads (0: from the start).",
                        "kept_end": "End of what the solver reads (kept_end = doc_chars: to the end)."},
    "causal_search": {"grounded": "True when the answer's distinctive terms are found in the evidence shown to the model.",
                      "grounding_note": "Why the answer is not grounded (terms not found in the evidence), or empty.",
                      "sources": "JSON list of the text units (chunk_id, title) the model was shown.",
                      "report_path": "Markdown report of the question.", "seconds": "Wall time of the step."},
}


def column_docs(asset: str, columns) -> dict[str, str]:
    """Descriptions of `columns` of `asset` (those we have one for)."""
    own = PER_ASSET.get(asset, {})
    out = {}
    for c in columns:
        text = own.get(c) or COMMON.get(c)
        if text:
            out[str(c)] = text
    return out
