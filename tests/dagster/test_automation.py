"""Sensors and schedules, evaluated for real against the shipped registries."""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone

from dagster import (AutomationConditionSensorDefinition, DagsterInstance, DefaultSensorStatus, build_schedule_context,
                     build_sensor_context)

from causal_assets.core.registry.fingerprint import source_fingerprint
from causal_assets.core.registry.corpora import CorpusSpec
from causal_assets.defs.automation import corpus_change_sensor, nightly_labels_and_evaluation
from causal_assets.defs.partitions import benchmark_partitions
from causal_assets.resources import CorpusRegistry

REGISTRY = {"corpus_registry": CorpusRegistry()}  # the shipped registry (the settings' default)


def test_corpus_change_sensor_records_then_requests_changed_partitions():
    with DagsterInstance.ephemeral() as instance:
        first = corpus_change_sensor(build_sensor_context(instance=instance, resources=REGISTRY))
        assert first.run_requests == []  # the first tick only records fingerprints
        cursor = json.loads(first.cursor)
        assert "default" in cursor
        cursor["default"] = "an-older-fingerprint"
        second = corpus_change_sensor(build_sensor_context(instance=instance, cursor=json.dumps(cursor),
                                                           resources=REGISTRY))
        assert [r.partition_key for r in second.run_requests] == ["default"]
        third = corpus_change_sensor(build_sensor_context(instance=instance, cursor=second.cursor, resources=REGISTRY))
        assert third.run_requests == []


def test_folder_fingerprint_changes_when_a_file_changes(tmp_path):
    (tmp_path / "a.md").write_text("one")
    spec = CorpusSpec(name="docs", loader="folder", path=str(tmp_path))
    before = source_fingerprint(spec)
    (tmp_path / "a.md").write_text("one, edited")
    os.utime(tmp_path / "a.md", ns=(1, 2))
    assert source_fingerprint(spec) != before
    assert source_fingerprint(CorpusSpec(name="x", loader="folder", path=str(tmp_path / "gone"))) == "missing"


def test_a_source_change_is_read_from_stats_first_then_contents(tmp_path):
    """What the commands compare with the state `corpus_chunks` recorded: a file touched but not changed is no
    change (its contents are read only because its mtime moved); an edit and an added file are."""
    from causal_assets.core.registry.fingerprint import source_change, source_record

    page = tmp_path / "a.md"
    page.write_text("one")
    spec = CorpusSpec(name="docs", loader="folder", path=str(tmp_path))
    recorded = source_record(spec)
    assert source_change(spec, recorded) is None
    os.utime(page, ns=(1, 2))
    assert source_fingerprint(spec) not in recorded and source_change(spec, recorded) is None
    page.write_text("two")
    assert source_change(spec, recorded) == f"its source {tmp_path} changed since its chunks were built (1 file(s), " \
                                            "contents changed)"
    (tmp_path / "b.md").write_text("new")
    assert source_change(spec, recorded).endswith("(1 file(s) then, 2 now)")
    assert source_change(spec, None) is None                     # chunks that record no source: not judged
    assert source_change(CorpusSpec(name="x", loader="folder", path=str(tmp_path / "gone")), recorded) is None


def test_nightly_schedule_requests_every_benchmark():
    context = build_schedule_context(scheduled_execution_time=datetime(2026, 11, 22, 2, tzinfo=timezone.utc))
    requests = list(nightly_labels_and_evaluation(context))
    assert sorted(r.partition_key for r in requests) == sorted(benchmark_partitions.get_partition_keys())
    assert all(r.run_key.endswith("2026-11-22") for r in requests)


def _folder_registry(tmp_path, root):
    import yaml

    reg = tmp_path / "corpora.yaml"
    reg.write_text(yaml.safe_dump({"corpora": [{"name": "default", "loader": "folder", "path": str(root)}]}))
    return {"corpus_registry": CorpusRegistry(path=str(reg))}


def test_content_restored_to_an_earlier_state_is_reindexed(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    doc = root / "a.md"
    resources = _folder_registry(tmp_path, root)

    def tick(cursor, text, mtime):
        doc.write_text(text)
        os.utime(doc, (mtime, mtime))
        return corpus_change_sensor(build_sensor_context(instance=instance, cursor=cursor, resources=resources))

    with DagsterInstance.ephemeral() as instance:
        a = tick(None, "A\n", 1e9)
        b = tick(a.cursor, "BB\n", 1.1e9)
        c = tick(b.cursor, "CCC\n", 1.2e9)
        b_again = tick(c.cursor, "BB\n", 1.1e9)   # B restored from a backup that keeps mtimes (cp -p)
    keys = [r.run_key for t in (b, c, b_again) for r in t.run_requests]
    assert len(keys) == 3
    assert len(set(keys)) == 3   # B's key had been used again: Dagster makes one run per key, so no re-index


def test_a_missing_source_is_a_warning_not_a_run_and_is_reindexed_when_back(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("A\n")
    resources = _folder_registry(tmp_path, root)
    with DagsterInstance.ephemeral() as instance:
        def tick(cursor):
            return corpus_change_sensor(build_sensor_context(instance=instance, cursor=cursor, resources=resources))

        first = tick(None)
        root.rename(tmp_path / "docs.away")   # an unmounted share, a directory moved away
        gone = tick(first.cursor)
        assert gone.run_requests == []   # a run that could only fail
        (tmp_path / "docs.away").rename(root)
        back = tick(gone.cursor)
    assert [r.partition_key for r in back.run_requests] == ["default"]


# Long runs or LLM calls: what must never start by itself
HEAVY_GROUPS = ("labels", "tuning", "evaluation")


def _automation_sensors():
    from causal_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    sensors = [s for s in defs.get_repository_def().sensor_defs if isinstance(s, AutomationConditionSensorDefinition)]
    return graph, {s.name: (s, s.asset_selection.resolve(graph)) for s in sensors}


def test_starting_the_ui_launches_no_tuning_evaluation_or_labels():
    graph, sensors = _automation_sensors()
    heavy = {key for key in graph.get_all_asset_keys() if graph.get(key).group_name in HEAVY_GROUPS}
    assert {"tuning", "evaluation", "labels"} <= {graph.get(k).group_name for k in heavy}
    automated = {key for key in graph.get_all_asset_keys() if graph.get(key).automation_condition is not None}
    assert automated & heavy, "the tuning and evaluation assets are eager (they follow when switched on)"
    for name, (sensor, keys) in sensors.items():
        if sensor.default_status == DefaultSensorStatus.RUNNING:
            assert not keys & heavy, (name, sorted(k.to_user_string() for k in keys & heavy))
    # every automated heavy asset is covered by a sensor that is off until switched on
    stopped = set().union(*(keys for s, keys in sensors.values() if s.default_status == DefaultSensorStatus.STOPPED))
    assert automated & heavy <= stopped
    # and the cheap ones (graph, entity vectors) still follow their index without a click
    running = set().union(*(keys for s, keys in sensors.values() if s.default_status == DefaultSensorStatus.RUNNING))
    assert {k.to_user_string() for k in automated - heavy} <= {k.to_user_string() for k in running}
    assert {"graph_nodes", "graph_edges", "graph_entity_embeddings"} <= {k.to_user_string() for k in running}
