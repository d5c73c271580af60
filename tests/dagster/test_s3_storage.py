"""Storage on S3: an S3-compatible server (moto's, on 127.0.0.1) holds the Parquet of real materializations under
`CAUSAL_ASSETS_BASE_PATH=s3://bucket/prefix`, the DuckDB catalog's views read it through fsspec (DuckDB's httpfs
extension is not needed), and a server that stops in the middle of a write leaves no partial Parquet visible: the
previous version stays whole. The endpoint and keys are botocore's own variables (`AWS_ENDPOINT_URL_S3`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), which every worker of a deployment sets."""
from __future__ import annotations

import threading
import time

import numpy as np
import pandas as pd
import pytest
import yaml
from dagster import materialize
from upath import UPath

from causal_assets.core.foundation.storage import read_parquet, write_parquet_atomic
from causal_assets.core.llm.server import free_port
from causal_assets.core.outputs.catalog import DuckDBCatalog
from causal_assets.defs.corpus import corpus_chunks
from causal_assets.resources import BenchmarkRegistry, CorpusRegistry, ParquetIOManagerFactory, Storage
from tests.dagster.procs import ROOT

pytestmark = pytest.mark.slow
BUCKET = "causal-assets-test"


@pytest.fixture
def s3(monkeypatch):
    moto_server = pytest.importorskip("moto.server", reason="moto[server] comes with the dev extra")
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    for name, value in {"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    import s3fs

    import fsspec

    # 5 MB parts (s3fs uploads 50 MB blocks by default): the test's 40 MB write is a multipart upload, which a
    # stopped server can cut off in the middle
    monkeypatch.setitem(fsspec.config.conf, "s3", {"default_block_size": 5 * 2**20})
    s3fs.S3FileSystem.clear_instance_cache()
    s3fs.S3FileSystem().mkdir(BUCKET)
    yield {"server": server, "port": port, "module": moto_server}
    server.stop()
    s3fs.S3FileSystem.clear_instance_cache()


def test_parquet_on_s3_read_by_the_catalog_and_never_partial(s3, tmp_path):
    import s3fs

    (tmp_path / "corpora.yaml").write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "folder", "path": str(ROOT / "examples" / "own-documents" / "docs")}]}))
    storage = Storage(base_path=f"s3://{BUCKET}/parquet", catalog_path=str(tmp_path / "catalog.duckdb"),
                      reports_dir=str(tmp_path / "reports"))
    resources = {"storage": storage, "io_manager": ParquetIOManagerFactory(storage=storage),
                 "corpus_registry": CorpusRegistry(path=str(tmp_path / "corpora.yaml")),
                 "benchmark_registry": BenchmarkRegistry(path=str(tmp_path / "corpora.yaml"))}
    assert materialize([corpus_chunks], resources=resources, partition_key="default").success
    fs = s3fs.S3FileSystem()
    assert fs.exists(f"{BUCKET}/parquet/corpus_chunks/default.parquet")
    chunks = read_parquet(UPath(f"s3://{BUCKET}/parquet/corpus_chunks/default.parquet"))
    assert len(chunks) > 0
    with DuckDBCatalog(str(tmp_path / "catalog.duckdb"), base=storage.base_path).connect() as con:
        assert con.execute("select count(*) from corpus_chunks").fetchone()[0] == len(chunks)

    # A write cut off by the server stopping: the previous version stays, whole, and nothing partial is visible.
    target = UPath(f"s3://{BUCKET}/parquet/big/default.parquet")
    old = pd.DataFrame({"x": [1, 2, 3]})
    write_parquet_atomic(old, target)
    big = pd.DataFrame({"blob": [np.random.default_rng(i).bytes(1 << 20) for i in range(40)]})   # 40 MB: multipart
    failed: list[BaseException] = []

    def write() -> None:
        try:
            write_parquet_atomic(big, target)
        except BaseException as e:   # the server went away
            failed.append(e)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    deadline = time.monotonic() + 120
    while writer.is_alive() and not _upload_started(fs):
        assert time.monotonic() < deadline, "no multipart upload began"
        time.sleep(0.02)
    s3["server"].stop()
    writer.join(timeout=300)
    assert failed, "the write finished before the server stopped"
    restarted = s3["module"].ThreadedMotoServer(ip_address="127.0.0.1", port=s3["port"], verbose=False)
    restarted.start()   # moto keeps its buckets in this process: the same store, seen again
    s3["server"] = restarted
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    visible = fs.ls(f"{BUCKET}/parquet/big", refresh=True)
    assert visible == [f"{BUCKET}/parquet/big/default.parquet"], visible
    assert read_parquet(target).equals(old)


def _upload_started(fs) -> bool:
    uploads = fs.call_s3("list_multipart_uploads", Bucket=BUCKET).get("Uploads", [])
    return bool(uploads)
