"""Stage 5, tuning: `tuned_encoder` fine-tunes the dense encoder on a benchmark's tune split where its registry
entry asks for it (`tuning.encoder`), and adopts it only if it wins on held-out tune queries (`tuned_embeddings`:
the corpus's vectors under it).

`tuned_retriever_configs` searches the parameters of the tunable retrievers (hybrid, RRF,
cascade, entity-first, causal, learned) on a benchmark's tune split only, records every trial as a Parquet
table (DuckDB view `tuned_retriever_configs`), and stores the winning configuration versioned by content hash
(YAML + model files under `<reports>/tuned/<benchmark>/`, see `core/stored/tuned.py`). The version is the
materialization's data version and `config_version` metadata: the evaluation evaluates exactly that version, each
tuned retriever as `<name>_tuned` on the held-out eval splits, and takes its configured baselines' BM25
statistics and hybrid weight from it (each parameter is chosen here, once).
"""
import json
from dataclasses import replace
import warnings

import pandas as pd
from dagster import (AssetDep, AssetExecutionContext, AssetOut, AutomationCondition, BetaWarning,
                     Config, DataVersion, Failure, MetadataValue, Output, asset, multi_asset)
from pydantic import Field

from causal_assets.core.foundation.limits import MAX_QUESTIONS
from causal_assets.core.outputs.checks import check_tuning_trials
from causal_assets.core.foundation.errors import CorpusError
from causal_assets.core.evaluation.answers import AnswerJudge, answer_questions, doc_chars, document_cut
from causal_assets.core.evaluation.truth import label_qrels
from causal_assets.core.index.dense import model_reference
from causal_assets.core.retrievers.cross_encoder import member_dir, member_dirs
from causal_assets.core.registry.retrievers import KINDS
from causal_assets.core.foundation.storage import asset_path, read_parquet
from causal_assets.core.stored.artifacts import CorpusArtifacts
from causal_assets.core.stored.models import fit_into
from causal_assets.core.stored.reuse import reuse_or_fit
from causal_assets.core.stored.tuned import (code_version, frame_digest, index_fingerprint, inputs_version,
                                             save_tuned, source_digest)
from causal_assets.core.tuning.encoder import encoder_version, tune_encoder
from causal_assets.core.tuning.records import (EMBEDDING_COLUMNS, ENCODER, ENCODER_COLUMNS, RERANKER,
                                               RERANKER_COLUMNS, TUNED, TUNED_EMBEDDINGS, encoder_record,
                                               encoder_vectors, kept_encoder, kept_tuning, reranker_intact,
                                               reranker_record, tuned_embeddings_path, unfitted)
from causal_assets.core.tuning.reranker import TUNE_SPLIT, reranker_versions, tune_reranker
from causal_assets.core.tuning.search import sample_queries, tune
from causal_assets.core.registry.tuning import TuningSpec
from causal_assets.defs.checks import check_result, spec
from causal_assets.defs.partitions import CORPUS_ARTIFACTS, benchmark_partitions
from causal_assets.core.llm import ledger
from causal_assets.defs.shared import TUNING_GROUP, eager_tolerating_missing, record_cost
from causal_assets.resources import ANN, LLM, BenchmarkRegistry, Storage

GROUP = TUNING_GROUP
def versioned(value, version: str, **kwargs) -> Output:
    """An output whose data version is `version` (a beta parameter in dagster 1.13): the UI shows what reads it
    stale only when the version changed, not when the same content was materialized again."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)
        return Output(value, data_version=DataVersion(version), **kwargs)


class EncoderConfig(Config):
    # fit again even when the last materialization already fitted this encoder version (`encoder_version`: the
    # same data, spec, seed and fitting code) and its model and vectors are still there
    refit: bool = False


@multi_asset(
    partitions_def=benchmark_partitions, group_name=GROUP, deps=[*CORPUS_ARTIFACTS],
    outs={ENCODER: AssetOut(kinds={"pytorch", "parquet"}, automation_condition=AutomationCondition.eager(),
                            description="Whether a dense encoder fine-tuned on the tune split was adopted: its and the "
                                        "corpus vectors' hybrid figures on held-out tune queries, the fit, the model "
                                        "directory."),
          TUNED_EMBEDDINGS: AssetOut(kinds={"parquet"}, automation_condition=AutomationCondition.eager(),
                                     description="The corpus's chunk vectors under the adopted fine-tuned encoder "
                                                 "(columns as corpus_embeddings); empty when none was adopted.")},
)
def tuned_encoder(context: AssetExecutionContext, config: EncoderConfig, storage: Storage,
                  benchmark_registry: BenchmarkRegistry):
    """Fine-tune the corpus's encoder on the tune split's judged pairs (`core/tuning/encoder.py`) where the
    registry's `tuning.encoder` asks for it; tuned_retriever_configs and the `*_tuned` evaluation runs then use it.
    A version fitted by the last materialization is kept, not fitted again (`refit: true` forces a fit)."""
    spec = benchmark_registry.spec(context.partition_key)
    tuning = TuningSpec.model_validate(spec.tuning)
    reason = "no tune split" if not spec.tune_split else \
        "not asked for (registry tuning.encoder)" if tuning.encoder is None else ""
    if reason:
        yield Output(pd.DataFrame(columns=EMBEDDING_COLUMNS), output_name=TUNED_EMBEDDINGS, metadata={"chunks": 0})
        yield Output(unfitted(ENCODER_COLUMNS, spec.name, reason), output_name=ENCODER,
                     metadata={"adopted": False, "reason": reason})
        return
    artifacts = CorpusArtifacts(storage.base, spec.corpus, ANN)
    index, bench = artifacts.index, artifacts.benchmark(spec, spec.tune_split)
    version = encoder_version(index, bench, tuning.encoder, tuning.seed)
    # beside the learned models of the same benchmark (fitted through `fit_into`)
    target = storage.reports_path / "tuned" / spec.name / f"encoder-{version}"
    record_path = asset_path(storage.base, ENCODER, spec.name)
    vectors_path = asset_path(storage.base, TUNED_EMBEDDINGS, spec.name)

    def kept(table: pd.DataFrame):
        """The last materialization's record and vectors when it fitted this version and what it adopted is intact:
        a job that selects the whole tuning group then costs no second fit (~10 min on SciFact)."""
        found = kept_encoder(table, record_path, vectors_path, target, len(index.chunks), index.fingerprint)
        if found is None:
            return None
        record, embeddings, by_weight = found
        return record, embeddings, {
            "adopted": bool(record["adopted"].iloc[0]), "version": version, "metric": tuning.metric, "reused": True,
            "held_out_by_weight": MetadataValue.json(by_weight),
            "held_out_gain": float(record["held_out_gain"].iloc[0]),
            "held_out_gain_se": float(record["held_out_gain_se"].iloc[0]),
            **({"model": MetadataValue.path(str(target.resolve()))} if record["adopted"].iloc[0] else {})}

    def fit():
        result = fit_into(target, lambda partial: tune_encoder(index, bench, tuning.encoder, tuning.metric, partial,
                                                               tuning.seed, context.log.info))
        # each table names the model relative to itself (a moved data directory keeps it), the metadata absolutely
        model_path = str(target.resolve()) if result.adopted else ""
        named_in = {table: model_reference(model_path, asset_path(storage.base, table, spec.name))
                    if model_path else "" for table in (ENCODER, TUNED_EMBEDDINGS)}
        record, by_weight = encoder_record(spec.name, result, tuning.metric, tuning.encoder, version,
                                           named_in[ENCODER])
        embeddings = encoder_vectors(spec.corpus, index, result, named_in[TUNED_EMBEDDINGS])
        return record, embeddings, {
            "adopted": bool(result.adopted), "version": version, "metric": tuning.metric, "reused": False,
            "held_out_by_weight": MetadataValue.json(by_weight),
            "held_out_gain": round(result.gain, 4), "held_out_gain_se": round(result.gain_se, 4),
            "fit_queries": result.fit_queries, "held_out_queries": result.held_out_queries, "pairs": result.pairs,
            "loss_first_last": MetadataValue.json([round(x, 4) for x in result.losses]),
            "seconds": MetadataValue.json(result.seconds),
            **({"model": MetadataValue.path(model_path)} if model_path else {})}

    (record, embeddings, metadata), reused = reuse_or_fit(record_path, version, fit, kept, columns=ENCODER_COLUMNS,
                                                          refit=config.refit)
    if reused:
        context.log.info(f"encoder {version}: fitted by the last materialization ({record['reason'].iloc[0]}), "
                         f"kept (config refit: true fits it again)")
    # the vectors first: a run killed between the two outputs leaves the previous record, which never points at
    # vectors that are not there
    yield versioned(embeddings, version, output_name=TUNED_EMBEDDINGS,
                    metadata={"chunks": len(embeddings), "reused": reused})
    yield versioned(record, version, output_name=ENCODER, metadata=metadata)


class RerankerConfig(Config):
    # fit every member again, even those an earlier materialization fitted for this fit version
    # (`reranker_versions`)
    refit: bool = False


def reranker_metadata(record: pd.DataFrame, reused: bool) -> dict:
    row = record.iloc[0]
    adopted = bool(row["adopted"])
    return {"adopted": adopted, "reason": str(row["reason"]), "reused": reused,
            **({"version": str(row["version"]), "weight": float(row["weight"]),
                "held_out_by_mix": MetadataValue.json(json.loads(row["held_out_by_mix"])),
                "held_out_gain": float(row["held_out_gain"]), "held_out_gain_se": float(row["held_out_gain_se"]),
                "members": int(row["members"]), "tune_split_queries": int(row["tune_split_queries"]),
                "held_out_by_member": MetadataValue.json(json.loads(row["held_out_by_member"])),
                "fit_seconds": float(row["fit_seconds"])} if row["version"] else {})}


@asset(
    partitions_def=benchmark_partitions, group_name=GROUP, kinds={"pytorch", "parquet"},
    deps=[*CORPUS_ARTIFACTS, AssetDep(ENCODER), AssetDep(TUNED_EMBEDDINGS)],
    automation_condition=AutomationCondition.eager(),
    description="Whether a cross-encoder fitted on the tune split was adopted to rerank the selected retriever: "
                "its held-out figures per mixing weight against the hybrid alone, the fit, the model directory.",
)
def tuned_reranker(context: AssetExecutionContext, config: RerankerConfig, storage: Storage,
                   benchmark_registry: BenchmarkRegistry):
    """Fit a cross-encoder on the tune split's judged pairs (`core/tuning/reranker.py`) where the registry's
    `tuning.reranker` asks for it, and adopt it only if it wins on held-out tune queries; the evaluation then
    reranks the selected tuned retriever with it (`cross_encoder_tuned`). A version fitted and decided by the last
    materialization is kept; otherwise the members an earlier fit of the same fit version saved are read, not
    fitted again (only `depth`, `mix`, `min_gain`, `standard_errors`, `refit_on_tune_split` or `members` changed: a
    raised count fits only the new members), and decided on again (`refit: true` fits every member). With
    `refit_on_tune_split`, an adopted ensemble is fitted again on the whole tune split (`tune-split/` in the fit's
    directory, read as well when there) and the record names that one."""
    spec = benchmark_registry.spec(context.partition_key)
    tuning = TuningSpec.model_validate(spec.tuning)
    reason = "no tune split" if not spec.tune_split else \
        "not asked for (registry tuning.reranker)" if tuning.reranker is None else ""
    if reason:
        record = unfitted(RERANKER_COLUMNS, spec.name, reason, version="")
        yield Output(record, metadata=reranker_metadata(record, False))
        return
    # the hybrid it reranks and draws negatives from: with the tuned encoder's vectors where one was adopted
    artifacts = CorpusArtifacts(storage.base, spec.corpus, ANN, tuned_embeddings_path(storage.base, spec.name))
    index, bench = artifacts.index, artifacts.benchmark(spec, spec.tune_split)
    r = tuning.reranker
    fitted_version, version = reranker_versions(index, bench, r, tuning.seed)
    # named by the fit's version: a new decision, or a raised member count, reads the members already fitted here
    target = storage.reports_path / "tuned" / spec.name / f"reranker-{fitted_version}"
    # the members an adoption reranks with: those decided on, or those fitted again on the whole tune split
    adopted_dir = target / TUNE_SPLIT if r.refit_on_tune_split else target

    def kept(table: pd.DataFrame):
        """The last record when it decided this version and the members it adopted are there; its held-out
        figures not JSON (not a record this asset wrote): decided again."""
        return (table, reranker_metadata(table, True)) if reranker_intact(table, adopted_dir, r.members) else None

    def fit():
        # the members this count asks for that an earlier adopted fit saved, on the fit share and, where asked
        # for, on the whole tune split (a lowered count or a refit no longer asked for leaves the rest out)
        dirs = (target, adopted_dir) if r.refit_on_tune_split else (target,)
        saved = {d for directory in dirs for d in member_dirs(directory)}
        reuse = () if config.refit else tuple(member_dir(directory, i).relative_to(target).as_posix()
                                              for i in range(r.members) for directory in dirs
                                              if member_dir(directory, i) in saved)
        if reuse:
            context.log.info(f"reranker {version}: {', '.join(reuse)} in {target.name} were fitted by an earlier "
                             f"materialization and are read, not fitted again (config refit: true fits them again)")
        result = fit_into(target, lambda partial: tune_reranker(index, bench, r, tuning.metric, partial, tuning.seed,
                                                                context.log.info), reuse)
        model_path = str((target / result.model).resolve())
        # relative to the table (a moved data directory keeps it), as tuned_encoder's
        record = reranker_record(spec.name, result, tuning.metric, r, version,
                                 model_reference(model_path, asset_path(storage.base, RERANKER, spec.name))
                                 if result.adopted else "")
        return record, {**reranker_metadata(record, False), "members_fitted": len(result.losses),
                        "members_read": len(reuse),
                        "loss_first_last": MetadataValue.json({m: [round(x, 4) for x in first_last]
                                                               for m, first_last in result.losses.items()}),
                        **({"model": MetadataValue.path(model_path)} if result.adopted else {})}

    (record, metadata), reused = reuse_or_fit(asset_path(storage.base, RERANKER, spec.name), version, fit, kept,
                                              columns=RERANKER_COLUMNS, refit=config.refit)
    if reused:
        context.log.info(f"reranker {version}: fitted by the last materialization, kept (config refit: true fits it "
                         f"again)")
    yield versioned(record, version, metadata=metadata)


class TuningConfig(Config):
    retrievers: list[str] | None = None   # default: the benchmark's `tuning.retrievers`, else its list + learned
    # a seeded sample of the tune split (quick runs); None: all of it
    max_queries: int | None = Field(default=None, ge=1, le=MAX_QUESTIONS)
    # tune again even when the last materialization tuned the same inputs (`inputs_version`: the index, graph,
    # questions, labels, other benchmarks' training rows, scoring LLM, specs and core code) and its files are there
    retune: bool = False


def tune_benchmark(spec, bench, mc_labels: pd.DataFrame | None, log=lambda m: None):
    """The tune split's questions with their truth: the gold documents; for a question whose gold is files without
    evidence (`registry.gold`: judged at file level, where a retriever that finds the page scores full marks
    whatever chunk it shows) the Monte Carlo labels' YES documents instead; and where the split has no gold (a
    questions file without it) the labels alone. A split with neither stops, naming the command that makes
    labels."""
    files = [q for q in bench.query_ids() if q in bench.file_level]
    if files:
        by_labels = label_qrels(mc_labels, files)
        qrels = {q: r for q, r in bench.qrels.items() if q not in bench.file_level} | by_labels
        log(f"{spec.name}: {len(files)} train question(s) have gold files without evidence: tuned against their "
            f"YES labels ({len(by_labels)} with one), never their files (a file-level truth rewards naming the page)")
        bench = replace(bench, qrels=qrels, file_level=frozenset())
    if any(any(v > 0 for v in judged.values()) for judged in bench.qrels.values()):
        return bench
    by_labels = label_qrels(mc_labels, bench.queries)
    if not by_labels:
        raise Failure(f"{spec.name}: nothing to tune on: the {len(bench.queries)} questions of tune split "
                      f"{bench.split!r} have no gold documents and no YES label"
                      + ("" if mc_labels is not None else f" (make labels first: `causal-assets label {spec.name}`)"))
    return replace(bench, qrels=by_labels)


@asset(
    partitions_def=benchmark_partitions, group_name=GROUP, kinds={"parquet"},
    deps=[*CORPUS_ARTIFACTS, AssetDep("mc_labels"), AssetDep(ENCODER), AssetDep(TUNED_EMBEDDINGS)],
    automation_condition=eager_tolerating_missing("mc_labels", ENCODER, TUNED_EMBEDDINGS),
    description="Every tuning trial (retriever, params, train metric); the winner is stored versioned under "
                "reports/tuned/<benchmark>/ and evaluated on the held-out split by evaluation_metrics.",
    check_specs=[spec(TUNED, "tuned_on_train_only", "No trial ran on an evaluation split; every trial's metric is "
                      "finite and in [0, 1].")],
)
def tuned_retriever_configs(context: AssetExecutionContext, config: TuningConfig, storage: Storage,
                            benchmark_registry: BenchmarkRegistry, llm: LLM):
    spec = benchmark_registry.spec(context.partition_key)
    meter = ledger.Meter.start(spec.name, TUNED, context.run_id)
    if not spec.tune_split:
        context.log.info(f"{spec.name}: no tune split, nothing is tuned (eval splits are never tuned on)")
        empty = pd.DataFrame(columns=["benchmark", "split", "retriever", "trial", "params", "metric", "value",
                                      "evaluation", "queries", "seconds", "best", "config_version", "inputs_version"])
        yield Output(empty, metadata={"tuned": False})
        yield check_result(TUNED, "tuned_on_train_only", check_tuning_trials(empty, spec.eval_splits))
        return
    tuning = TuningSpec.model_validate({**spec.tuning, **({"retrievers": config.retrievers}
                                                          if config.retrievers is not None else {})})
    # the fine-tuned encoder's vectors where tuned_encoder adopted one (its held-out decision), else the corpus's
    encoder = tuned_embeddings_path(storage.base, spec.name)
    artifacts = CorpusArtifacts(storage.base, spec.corpus, ANN, encoder)
    labels_path = asset_path(storage.base, "mc_labels", spec.name)
    mc_labels = read_parquet(labels_path) if labels_path.exists() else None
    bench = tune_benchmark(spec, artifacts.benchmark(spec, spec.tune_split), mc_labels, context.log.info)
    bench = sample_queries(bench, config.max_queries, tuning.seed)
    index, graph = artifacts.index, artifacts.graph

    # The learned model's extra training rows depend on which other benchmarks are built in this data dir: said
    # in the metadata, since the chosen model (and every retriever built on it) changes with them.
    learned_extra: dict[str, str] = {}

    def extra_source(name: str):
        """Another benchmark's tune split and index, for the learned model's extra training rows (never its eval
        splits); None when it is not registered, has no tune split or its index is not materialized."""
        other = benchmark_registry.specs().get(name)
        if other is None or not other.tune_split or not other.available():
            learned_extra[name] = "not registered or no data"
            return None
        try:
            theirs = CorpusArtifacts(storage.base, other.corpus, ANN)
            source = theirs.index, theirs.benchmark(other, other.tune_split), theirs.graph
        except (OSError, ValueError, CorpusError) as e:
            context.log.warning(f"learned_extra {name!r}: index of corpus {other.corpus!r} not loadable ({e})")
            learned_extra[name] = f"left out: corpus {other.corpus!r} not loadable"
            return None
        learned_extra[name] = f"used: {len(source[1].query_ids())} {other.tune_split} questions"
        return source

    resolved = tuning.resolved_retrievers(list(spec.retrievers), bench.within is not None)
    # loaded before tuning (not when the learned model asks), so what they hold is part of the inputs' version
    extras = {name: extra_source(name) for name in tuning.learned_extra if name != spec.name} \
        if tuning.trains_model(resolved) else {}
    # The causal retriever is tuned with the LLM's answer likelihood wherever the LLM can score prompts, else
    # with the lexical fallback (named in the log and the metadata); query_likelihood, and the learned model's
    # question-likelihood feature where the registry offers it, only where it can.
    scoring = tuning.may_score(resolved)
    scorer = llm.scorer if scoring and llm.scores_prompts() else None
    # The answer gain is a third truth to select by where the registry measures answers and the LLM scores prompts
    # (core/tuning/truths.py); the judge's model is loaded only when the tuning runs.
    answers = spec.answer_settings
    answered = answer_questions(bench.queries, bench.answers, bench.query_ids(), len(bench.queries))
    judged_by_answers = answers.enabled and bool(answered) and llm.scores_prompts()
    if tuning.select_by == "answers" and not judged_by_answers:
        raise CorpusError(f"benchmark {spec.name!r}: tuning.select_by answers needs `answers: {{enabled: true}}` "
                          f"(now {answers.enabled}), train questions with an answer ({len(answered)} of "
                          f"{len(bench.query_ids())}) and an LLM that scores prompts; nothing tuned")
    inputs = inputs_version({
        # the reranker is fitted after the tuning and never read by it (tuned_reranker)
        "benchmark": spec.model_dump(exclude={"path", "tuning"}), "tuning": tuning.model_dump(exclude={"reranker"}),
        "ann": repr(ANN),
        **source_digest(index, bench, graph), "mc_labels": frame_digest(mc_labels),
        "learned_extra": {name: source_digest(*x) if x else None for name, x in extras.items()},
        # the scoring model by name: a server that changes what a name serves needs `retune: true`
        "llm": {"base_url": llm.base_url, "model": llm.model, "solver": llm.solver,
                "scoring_mode": llm.scoring_mode} if scorer is not None or judged_by_answers else None,
        "answers": answers.model_dump() if judged_by_answers else None,
        "code": code_version()})
    def fit():
        judge = AnswerJudge(bench.queries, bench.answers, bench.aliases,
                            document_cut(index, doc_chars(spec)),
                            llm.scorer(spec.monte_carlo.get("solver")), spec.validator) \
            if judged_by_answers else None
        result = tune(index, bench, tuning, spec.retrievers, artifacts.neighbors, graph, mc_labels,
                      forbidden=tuple(spec.eval_splits), log=context.log.info, extra_sources=extras.get,
                      scorer=scorer, judge=judge, answer_questions=answers.max_questions)
        content = {"benchmark": spec.name, "corpus": spec.corpus, "tune_split": spec.tune_split,
                   "metric": tuning.metric, "index": index_fingerprint(index), "graph": graph is not None,
                   "selected": result.selected, "selection_note": result.selection_note,
                   "retrievers": result.best,
                   **({"truths": result.truths.content()} if result.truths is not None else {})}
        stored = save_tuned(tuned_root, spec.name, content, result.models)
        trials = result.trials.assign(benchmark=spec.name, split=bench.split, config_version=stored.version,
                                      inputs_version=inputs)
        return trials[["benchmark", "split", *[c for c in trials.columns if c not in ("benchmark", "split")]]], stored

    # the last materialization's trials and configuration when it tuned the same inputs and the configuration and
    # its models are intact: a job that selects the whole tuning group then tunes nothing twice
    tuned_root = storage.reports_path / "tuned"
    (trials, stored), reused = reuse_or_fit(asset_path(storage.base, TUNED, spec.name), inputs, fit,
                                            lambda table: kept_tuning(table, tuned_root, spec.name),
                                            column="inputs_version", refit=config.retune)
    if reused:
        context.log.info(f"{spec.name}: the last materialization tuned these inputs ({inputs}): configuration "
                         f"{stored.version} kept (config retune: true tunes again)")
    chosen = stored.retrievers
    best = {n: round(b["value"], 4) for n, b in chosen.items()}
    # what the selection compared: each retriever's nested CV figure (core.tuning.search)
    selection = {n: round(b["selection_value"], 4) for n, b in chosen.items() if "selection_value" in b}
    metadata = {
        "tuned": True, "reused": reused, "inputs_version": inputs, "config_version": stored.version,
        "config_path": MetadataValue.path(str(stored.path)),
        "selected": stored.selected or "", "tune_split": bench.split, "tune_queries": len(bench.query_ids()),
        "selection_note": str(stored.content.get("selection_note") or ""),
        # each truth's choice on the tune split (core/tuning/truths.py); `select_by` picks the selected one
        "selected_by": MetadataValue.json((stored.content.get("truths") or {}).get("selected_by") or {}),
        "select_by": tuning.select_by,
        "metric": tuning.metric, "best_by_retriever": MetadataValue.json(best),
        "selection_by_retriever": MetadataValue.json(selection),
        # a combination is selectable only beyond one standard error of what it is built on (core.tuning.search)
        "combination_margins": MetadataValue.json({n: b["selection_margin"] for n, b in chosen.items()
                                                   if "selection_margin" in b}),
        "mc_labels": "used" if mc_labels is not None else "absent",
        "encoder": f"tuned ({index.embedder.model_name})" if encoder is not None else index.embedder.model_name,
        **({"learned_extra": MetadataValue.json(learned_extra)} if learned_extra else {}),
        **{f"{n}_answer_model": b["params"].get("answer_model", "") for n, b in chosen.items()
           if KINDS[n].scores == "answer_model"},
        "config": MetadataValue.md("```yaml\n" + stored.path.read_text() + "```"),
        **record_cost(context, storage, meter),
    }
    # the configuration's version is the data version: the evaluation shows stale when a tuning produced another
    yield versioned(trials, stored.version, metadata=metadata)
    yield check_result(TUNED, "tuned_on_train_only", check_tuning_trials(trials, spec.eval_splits))
