"""`causal-assets search`: a query against a corpus index, with no Dagster import on the way (BM25 in ~1 s)."""
from __future__ import annotations

import json
import re
import sys

from causal_assets.commands import pass_to_runs, say, source_change, stale_line
from causal_assets.core.foundation import strict_json
from causal_assets.core.stored import needs
from causal_assets.core.index.ann import AnnConfig
from causal_assets.core.index.search import METHODS, CorpusIndex
from causal_assets.core.foundation.limits import MAX_QUERY_CHARS
from causal_assets.core.registry.retriever_params import params_problem
from causal_assets.core.registry.retrievers import kind, may_need
from causal_assets.core.foundation.storage import safe_name
from causal_assets.core.registry.corpora import DEFAULT_CORPUS

SNIPPET_CHARS = 110


def snippet(text: str, chunk_id: str, title: str, width: int = SNIPPET_CHARS) -> str:
    """The start of a chunk's text without what the other columns already show (its title or id on the first line)
    and without decorator lines: the words a reader needs to judge the hit."""
    lines = [ln.strip() for ln in (text or "").splitlines()]
    names = {s for s in (chunk_id, title, chunk_id.rsplit(".", 1)[-1], title.rsplit(".", 1)[-1]) if s}
    lines = [ln for ln in lines if ln and ln not in names and not ln.startswith("@")]
    flat = re.sub(r"\s+", " ", " ".join(lines)).strip()
    for name in sorted(names, key=len, reverse=True):
        if flat.startswith(name + " "):
            flat = flat[len(name) + 1:]
    return flat if len(flat) <= width else flat[:width - 1].rstrip() + "…"


def tuned_choice(args, params: dict) -> tuple[str, dict]:
    """(method, params) of `--tuned BENCHMARK`: the retriever its tuning selected (or `--method`, when it was
    tuned), with the tuned params and fitted model; the corpus is the benchmark's."""
    from causal_assets.core.registry.benchmarks import load_benchmark_registry
    from causal_assets.core.stored.tuned import current_tuned

    settings = args.settings
    specs = load_benchmark_registry(settings.benchmarks, settings.shared_data, settings.corpora)
    if args.tuned not in specs:
        raise ValueError(f"--tuned: unknown benchmark {args.tuned!r} in {settings.benchmarks} (benchmarks: "
                         f"{', '.join(sorted(specs))})")
    spec = specs[args.tuned]
    if args.corpus not in (DEFAULT_CORPUS, spec.corpus):
        raise ValueError(f"--tuned {args.tuned}: its retrievers were tuned on corpus {spec.corpus!r}, not "
                         f"{args.corpus!r} (leave --corpus out)")
    args.corpus = spec.corpus
    try:
        tuned = current_tuned(args.base_path, settings.reports / "tuned", spec.name)
    except (FileNotFoundError, ValueError) as e:
        raise ValueError(f"--tuned: {e}") from None
    method = args.method or tuned.selected
    if method not in tuned.retrievers:
        raise ValueError(f"--tuned {args.tuned}: {method!r} was not tuned (tuned: {', '.join(tuned.retrievers)}; "
                         f"selected: {tuned.selected})")
    say(f"{method} as tuned for {spec.name!r} (configuration {tuned.version}"
        + (", selected" if method == tuned.selected else "") + ")")
    return method, {**tuned.params(method), **params}


def fitted_benchmarks(args) -> list[str]:
    """The benchmarks over `args.corpus` whose current tuned configuration holds `args.method` (a fitted model)."""
    from causal_assets.core.registry.benchmarks import load_benchmark_registry
    from causal_assets.core.stored.tuned import current_tuned

    settings, out = args.settings, []
    for name, spec in load_benchmark_registry(settings.benchmarks, settings.shared_data, settings.corpora).items():
        if spec.corpus != args.corpus:
            continue
        try:
            if args.method in current_tuned(args.base_path, settings.reports / "tuned", name).retrievers:
                out.append(name)
        except (FileNotFoundError, ValueError):
            continue
    return out


def search(args) -> int:
    query = sys.stdin.read() if args.query == "-" else args.query
    if not query.strip():
        raise ValueError("query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
    if args.k < 1:
        raise ValueError(f"-k must be at least 1 (got {args.k})")
    safe_name(args.corpus, "corpus")
    try:
        params = strict_json.loads(args.params)
    except json.JSONDecodeError as e:
        raise ValueError(f"--params is not valid JSON ({e})") from None
    except ValueError as e:   # a key given twice (json kept the last one), NaN or Infinity
        raise ValueError(f"--params: {e}") from None
    if not isinstance(params, dict):
        raise ValueError(f"--params must be a JSON object ({{\"name\": value, ...}}), not a {type(params).__name__}")
    if getattr(args, "tuned", None):
        args.method, params = tuned_choice(args, params)
    args.method = args.method or "bm25"
    if args.method in METHODS and params:   # these search the index as it is: a setting would be silently ignored
        raise ValueError(f"--method {args.method} takes no --params (given: {', '.join(sorted(params))})")
    problem = params_problem(args.method, params)   # a weight, depth or k out of its bound, before any build
    if problem:
        raise ValueError(f"--params {problem[0]}: {problem[1]}")

    if kind(args.method).tuning == "fit" and "model_path" not in params:
        # the model a benchmark over this corpus fitted, when exactly one did
        fitted = fitted_benchmarks(args)
        if len(fitted) != 1:
            raise ValueError(f"--method {args.method} needs a fitted model: "
                             + (f"give --tuned BENCHMARK, one of {', '.join(fitted)}" if fitted else
                                f"no benchmark over corpus {args.corpus!r} has tuned one here (`causal-assets tune "
                                f"BENCHMARK`), or give --params '{{\"model_path\": \"<file>\"}}'"))
        args.tuned = fitted[0]
        args.method, params = tuned_choice(args, params)
    # what the method needs besides the chunks and the sparse index (a combination: whatever a member may)
    need = may_need(args.method)
    wanted = needs.required(dense="embeddings" in need, graph="neighbors" in need)
    why = f"search --method {args.method}"
    changed = source_change(args.settings, args.base_path, args.corpus)
    if changed and args.no_build:   # searched as built, and said so (docs/cli.md, `search`)
        say(stale_line(args.corpus, changed, why))
    if needs.missing(args.base_path, args.corpus, wanted) or (changed and not args.no_build):
        # Building runs Dagster, whose import alone takes seconds: only imported when something is to be built.
        pass_to_runs(args)
        from causal_assets.commands.build import ensure_built

        ensure_built(args.base_path, args.corpus, wanted, no_build=args.no_build, why=why, verbose=args.verbose,
                     changed=None if args.no_build else changed)
    index = CorpusIndex.load(args.base_path, args.corpus, dense="embeddings" in need,
                             ann_config=AnnConfig(min_chunks=args.settings.ann_min_chunks))
    if args.method in METHODS:
        hits = index.search(query, k=args.k, method=args.method, one_shot=True)  # this process answers one query
    else:
        # Only for the composite methods: the retrievers import scikit-learn, networkx and more (seconds), which a
        # BM25 search must not pay.
        from causal_assets.core.graph.store import load_chunk_neighbors, load_graph
        from causal_assets.core.retrievers.factory import build_retriever, uses_scorer

        graph = load_graph(args.base_path, args.corpus, index.fingerprint) if "graph" in need else None
        scorer = None
        if uses_scorer(args.method, params, False):   # a causal run keeps its lexical default here
            # the packaged local solver, in-process and through the call cache (the assets use the `llm` resource's)
            from causal_assets.core.llm.cache_location import open_call_cache
            from causal_assets.core.llm.models import DEFAULT_SOLVER, local_scorer

            scorer = local_scorer(args.settings.solver or DEFAULT_SOLVER, open_call_cache(args.settings.llm_cache),
                                  args.settings.models_dir)
        try:
            retriever = build_retriever(args.method, index, params,
                                        load_chunk_neighbors(args.base_path, args.corpus, index.fingerprint),
                                        graph=graph, scorer=scorer)
        except TypeError as e:   # a keyword the retriever does not take: name it, without the traceback
            raise ValueError(f"--params for --method {args.method}: {e}") from None
        hits = retriever.retrieve_many([query], args.k)[0]
    if kind(args.method).family == "lexical":
        hits = [h for h in hits if h.score > 0]  # a zero score is no match, not a result
        if not hits:
            terms = index.terms(query)
            why = (f"no chunk of corpus {args.corpus!r} contains any of the query's index terms {terms[:20]}" if terms
                   else "the query has no index terms (only stopwords, punctuation or symbols)")
            say(f"{why}; nothing for {args.method} to match (try --method dense)")
            if args.json:
                print("[]")
            return 1
        if len(hits) < args.k:
            say(f"only {len(hits)} chunk(s) of corpus {args.corpus!r} contain a term of the query "
                f"(try --method dense for more)")
    elif len(hits) < args.k:
        why = (f"entity_first ranks the corpus's shortlist of {len(hits)} (--params '{{\"shortlist\": {args.k}}}' "
               f"for more)" if "within" in need else f"{args.method} returned no more")
        say(f"only {len(hits)} result(s): {why}")
    if args.json:
        print(json.dumps([h.__dict__ for h in hits], indent=2))
        return 0
    for h in hits:
        title = f"  {h.title}" if h.title and h.title not in h.chunk_id else ""  # code: the title is the id
        print(f"{h.rank:>3}  {h.score:8.4f}  {h.chunk_id}  [{h.kind}]{title}")
        print(f"{'':15}{snippet(index.text(h.chunk_id), h.chunk_id, h.title)}")
    return 0
