"""The lineage diagram (README.md and docs/pipeline.md) names every asset of the code location and no asset that does
not exist, and each arrow between two assets is an edge of the asset graph (an upstream asset, directly or through
the corpus artifacts node). Every `--select` of the README and the docs can run."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from causal_assets.definitions import defs

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DIAGRAM_PAGES = [README, ROOT / "docs" / "pipeline.md"]


def _diagram(page: Path = README) -> str:
    text = page.read_text()
    start = text.index("```mermaid\nflowchart LR")
    return text[start:text.index("```\n", start + 10)]


@pytest.mark.parametrize("page", DIAGRAM_PAGES, ids=lambda p: p.name)
def test_readme_lineage_diagram_names_exactly_the_assets(page):
    graph = defs.resolve_asset_graph()
    assets = {k.to_user_string() for k in graph.get_all_asset_keys()}
    named = set(re.findall(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+", _diagram(page))) - {"one_partition", "per_corpus"}
    groups = {graph.get(k).group_name for k in graph.get_all_asset_keys()}
    assert assets <= named, f"assets missing from the {page.name} diagram: {sorted(assets - named)}"
    unknown = named - assets - groups - {"retrieval_dataset", "config_version", "mc_labels"}
    assert not unknown, f"names in the {page.name} diagram that are not assets or groups: {sorted(unknown)}"


@pytest.mark.parametrize("page", DIAGRAM_PAGES, ids=lambda p: p.name)
def test_readme_lineage_arrows_are_asset_graph_edges(page):
    graph = defs.resolve_asset_graph()
    parents = {k.to_user_string(): {p.to_user_string() for p in graph.get(k).parent_keys}
               for k in graph.get_all_asset_keys()}
    names = {}   # mermaid node id -> the asset names its label holds
    for node, label in re.findall(r"\b([A-Z]{1,2})(?:\[|\{\{)\"?([^\]}\"]+)", _diagram(page)):
        names.setdefault(node, set()).update(re.findall(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+", label))
    arrows = 0
    for line in _diagram(page).splitlines():
        hops = re.split(r"\s*--(?:\s*\"[^\"]*\"\s*--)?>\s*", line.strip())
        for left, right in zip(hops, hops[1:]):
            ids = lambda side: [re.match(r"[A-Z]{1,2}", part.strip()).group(0) for part in side.split("&")]
            if "CA" in ids(left):
                continue   # the corpus artifacts node stands for the index and graph tables
            sources = set().union(*(names.get(i, set()) for i in ids(left)))
            for target in set().union(*(names.get(i, set()) for i in ids(right))) & set(parents):
                arrows += 1
                assert sources & parents[target], (f"{page.name} arrow {left} --> {right}: none of {sorted(sources)} "
                                                   f"is upstream of {target}")
    assert arrows >= 15


def test_the_diagram_pages_agree():
    assert _diagram(README) == _diagram(DIAGRAM_PAGES[1])


def test_every_asset_selection_in_the_readme_can_run():
    """Each `--select` of the README and the docs pages names assets of the code location, and a multi-asset that
    cannot be subset whole: `--select 'evaluation_metrics,evaluation_runs,evaluation_failures'` fails as written
    (DagsterInvalidSubsetError), and `'evaluation_*'` selects none of the evaluation tables."""
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string(): k for k in graph.get_all_asset_keys()}
    text = "\n".join(p.read_text() for p in [README, *sorted((ROOT / "docs").glob("*.md"))])
    selections = re.findall(r"--select '([^']+)'|--select ([a-z_,]+)", text)
    assert len(selections) >= 8   # the regex finds the selections of the pages (10 today)
    for selection in {a or b for a, b in selections}:
        names = selection.split(",")
        unknown = [n for n in names if n not in keys]
        assert not unknown, f"--select '{selection}': {unknown} are not assets"
        for name in names:
            together = {k.to_user_string() for k in graph.get(keys[name]).execution_set_asset_keys}
            assert together <= set(names), f"--select '{selection}': {name} runs only with {sorted(together)}"
