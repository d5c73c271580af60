"""causal_assets: a retrieval lifecycle for RAG as Dagster assets (README.md).

Every model is packaged or local: no process that imports the package may download from a model hub. Hugging
Face libraries read these switches when they are first imported, so they are set here, before any module of the
package can import them (the models are also loaded with `local_files_only`). A value set by the caller wins.
"""
import os as _os

_os.environ.setdefault("HF_HUB_OFFLINE", "1")
_os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def __getattr__(name: str):
    """`causal_assets.BenchmarkComponent` (the `type:` of a `defs.yaml`), imported on first use only: the command line
    and the core never pay for Dagster's components."""
    if name == "BenchmarkComponent":
        from causal_assets.components import BenchmarkComponent

        return BenchmarkComponent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "BenchmarkComponent"])   # `dg list components` finds registry objects with dir()
