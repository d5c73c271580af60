"""Run the performance suite and write data/benchmarks/SUMMARY.md: every figure against its target.

    python benchmarks/run_all.py                 # everything (~40-60 min on 2 cores: 1M-chunk scaling, cold lineage)
    python benchmarks/run_all.py --quick         # small sizes, fewer repeats; no 1M chunks, no lineage run (~5 min)
    python benchmarks/run_all.py --skip lineage_e2e scaling
    python benchmarks/run_all.py --only bm25_qps query_latency
    python benchmarks/run_all.py --summary-only  # rewrite SUMMARY.md from the JSON already in data/benchmarks/
    python benchmarks/run_all.py --quick --only metrics_speed --out /tmp/bench   # JSON, logs and summary elsewhere

Every benchmark runs in its own process (one's memory and threads never affect the next), in the order below,
its output in data/benchmarks/logs/<topic>.log. Needs the SciFact and HotpotQA corpus index materialized in
data/parquet (the scaling corpus is made of it):
`dagster asset materialize -m causal_assets.definitions --select 'corpus_chunks,corpus_embeddings,sparse_postings,sparse_vocabulary' --partition scifact`
(and `--partition hotpotqa`).

The machine is shared: each JSON records the load average at the start and end of its measurement, and the
summary shows it beside every figure.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import OUT_DIR, ROOT, load_average, machine

PY = sys.executable
HERE = Path(__file__).resolve().parent

# topic, script, extra args (full run), extra args (quick run), whether --quick is passed through
SUITE = [
    ("metrics_speed", "metrics_speed.py", [], [], True),
    ("bm25_qps", "bm25_qps.py", [], [], True),
    ("embedding_throughput", "embedding_throughput.py", [], [], True),
    ("embedding_backends", "embedding_backends.py", [], [], True),
    ("dense_latency", "dense_latency.py", [], [], True),
    ("query_latency", "query_latency.py", [], [], True),
    ("incremental_reindex", "incremental_reindex.py", [], [], True),
    ("build_rates", "build_rates.py", [], [], True),
    ("mc_simulation", "mc_simulation.py", [], [], True),
    ("scaling", "scaling.py", [], [], True),
    ("cli_timings", "cli_timings.py", [], [], True),  # needs the default corpus built (README command 1)
    ("lineage_e2e", "lineage_e2e.py", [], None, False),  # None: not run with --quick
]
TOPICS = [s[0] for s in SUITE]
ORDER = ["embedding_throughput", "embedding_backends", "dense_latency", "incremental_reindex", "build_rates",
         "query_latency",
         "scaling", "bm25_qps", "metrics_speed", "mc_simulation", "cli_timings", "lineage_e2e"]


def run_suite(quick: bool, topics: list[str], out: Path = OUT_DIR) -> dict:
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    status = {}
    for topic, script, full_args, quick_args, passes_quick in SUITE:
        if topic not in topics:
            continue
        if quick and quick_args is None:
            print(f"--- {topic}: skipped in --quick", flush=True)
            status[topic] = {"skipped": "quick"}
            continue
        cmd = [PY, str(HERE / script), *(quick_args if quick else full_args), "--out", str(out)]
        if quick and passes_quick:
            cmd.append("--quick")
        print(f"--- {topic}: {' '.join(cmd[1:])}  (load {load_average()})", flush=True)
        t0 = time.perf_counter()
        with (logs / f"{topic}.log").open("w") as log:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
        seconds = time.perf_counter() - t0
        status[topic] = {"returncode": rc, "seconds": round(seconds, 1), "command": " ".join(cmd[1:])}
        tail = (logs / f"{topic}.log").read_text().splitlines()
        for line in tail:
            if line.startswith("[") and "]" in line[:8]:
                print("   " + line, flush=True)
        if rc != 0:
            print(f"   FAILED (rc {rc}) after {seconds:.0f} s; last lines:", flush=True)
            for line in tail[-8:]:
                print("   | " + line, flush=True)
    return status


def latest(topic: str, prefer_quick: bool, out: Path = OUT_DIR) -> dict | None:
    """The topic's JSON: the full run's, or with --quick the quick one when it exists."""
    names = [f"{topic}_quick.json", f"{topic}.json"] if prefer_quick else [f"{topic}.json", f"{topic}_quick.json"]
    for name in names:
        path = out / name
        if path.exists():
            return json.loads(path.read_text())
    return None


def fmt(value, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "share":
        return f"{value * 100:.1f}%"
    if isinstance(value, float):
        return f"{value:.4g} {unit}".strip()
    return f"{value} {unit}".strip()


def summary(quick: bool, status: dict, out: Path = OUT_DIR) -> str:
    lines = ["# Performance suite summary", "",
             f"Written {time.strftime('%Y-%m-%d %H:%M:%S %Z')} by `python benchmarks/run_all.py"
             f"{' --quick' if quick else ''}`. Machine: {json.dumps({k: v for k, v in machine().items() if k != 'load_average'})}.",
             "Every figure is a median of repeated runs or a ratio of such medians; `load` is the 1/5/15-minute load "
             "average when that benchmark started (2 cores: above 2 means other jobs were competing for the CPU).", "",
             "| area | figure | value | target | verdict | load at start | note |", "|---|---|---|---|---|---|---|"]
    misses = []
    for topic in ORDER:
        data = latest(topic, quick, out)
        if data is None:
            why = status.get(topic, {}).get("skipped") or "not run"
            lines.append(f"| {topic} | — | — | — | {why} | — | — |")
            continue
        load = data.get("machine_start", {}).get("load_average")
        for f in data["figures"]:
            verdict = {True: "**PASS**", False: "**MISS**", None: "—"}[f["passed"]]
            target = f"{f['comparison']} {fmt(f['target'], f['unit'])}" if f["target"] is not None else "—"
            note = f["note"].replace("|", "/")
            tag = " (quick)" if data.get("quick") else ""
            lines.append(f"| {topic}{tag} | {f['name']} | {fmt(f['value'], f['unit'])} | {target} | {verdict} | "
                         f"{load} | {note} |")
            if f["passed"] is False:
                misses.append(f"{topic}: {f['name']}")
    lines += ["", f"Misses: {len(misses)}" + ("" if not misses else " — " + "; ".join(misses)), ""]

    scaling = latest("scaling", quick, out)
    if scaling:
        d = scaling["details"]
        lines += ["## Scaling", "", f"![scaling]({Path(d['plot']).name})", "",
                  "Index seconds (`~` = estimated: linear from the largest measured size, or from the measured "
                  "embedding throughput) and query p50 in ms with the query embedding included.", "",
                  "| chunks | analyze s | BM25 build s | TF-IDF build s | ANN build s | embedding s | BM25 ms | "
                  "dense ms | dense exact ms | dense ANN ms | hybrid ms | ANN recall@10 | RSS MiB |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

        def cell(r, key):
            if key in r["index"]:
                return f"{r['index'][key]:.1f}"
            if key in r.get("index_estimated", {}):
                return f"~{r['index_estimated'][key]:.0f}"
            return "—"

        for r in d["rows"]:
            lat = r["latency_ms"]
            rec = r.get("dense_recall_at_10", r.get("ann_recall_at_10"))
            lines.append(" | ".join([
                f"| {r['n']:,}", cell(r, "analyze_s"), cell(r, "bm25_build_s"), cell(r, "tfidf_build_s"),
                cell(r, "ann_build_s"), cell(r, "embedding_s"), str(lat["bm25"]["p50"]), str(lat["dense"]["p50"]),
                str(lat["dense_exact"]["p50"]), str(lat.get("dense_ann", {}).get("p50", "—")),
                str(lat["hybrid"]["p50"]), "—" if rec is None else f"{rec:.3f}",
                f"{r['memory_mib']['process_rss_after_queries']} |"]))
        lines += ["", "Log-log slopes (1 = linear), last step: " +
                  ", ".join(f"{k} {v['last_step']}" for k, v in d["loglog_slopes"].items()), ""]

    lineage = latest("lineage_e2e", False, out)
    if lineage and "cold" in lineage["details"]["runs"]:
        cold = lineage["details"]["runs"]["cold"]
        lines += ["## Default lineage, time per asset step (cold run)", "", "| step | seconds |", "|---|---|"]
        for step, s in sorted(cold["steps_s"].items(), key=lambda kv: -kv[1]):
            lines.append(f"| {step} | {s:.1f} |")
        lines.append("")
    if status:
        lines += ["## This invocation", "", "| benchmark | exit code | seconds |", "|---|---|---|"]
        for topic, s in status.items():
            lines.append(f"| {topic} | {s.get('returncode', s.get('skipped'))} | {s.get('seconds', '—')} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes and repeats; skips the 1M chunks and the lineage")
    ap.add_argument("--skip", nargs="*", default=[], choices=TOPICS, metavar="TOPIC", help=f"of {TOPICS}")
    ap.add_argument("--only", nargs="*", choices=TOPICS, metavar="TOPIC")
    ap.add_argument("--summary-only", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="directory for the JSON, logs and SUMMARY.md")
    args = ap.parse_args()
    topics = [t for t in (args.only or TOPICS) if t not in args.skip]
    status = {} if args.summary_only else run_suite(args.quick, topics, args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "SUMMARY.md"
    path.write_text(summary(args.quick, status, args.out) + "\n")
    print(f"wrote {path}")
    if any(s.get("returncode") not in (0, None) for s in status.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
