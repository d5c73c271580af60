"""The DuckDB catalog: one view per asset over its Parquet files, for ad-hoc SQL.

DuckDB lets one read-write connection exclude every other process, so the catalog holds only views, written by
short-lived connections; views over `<asset>/*.parquet` globs see new data without a refresh, and a fingerprint in
each view's comment tells an unchanged view without a write. A user holding the file open defers a refresh, never
fails a run; any other failure is a `CatalogError` naming the file. Local Parquet is named relative to the catalog's
directory, so a moved `data/` reads its own files; fsspec base paths work through `register_filesystem`. Views carry
column comments (`core/foundation/schemas.py`), and show ids that files of earlier versions stored under other names
under today's (`chunk_id`, `query_id`: `todays_names`). See docs/sql.md.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import re
import time
from pathlib import Path

import duckdb
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractFileSystem
from fsspec.utils import stringify_path
from upath import UPath

from causal_assets.core.foundation.errors import CatalogError, first_line
from causal_assets.core.foundation.schemas import column_docs
from causal_assets.core.foundation.storage import LOCAL_PROTOCOLS, RENAMED_COLUMNS

log = logging.getLogger(__name__)


def fsspec_filesystem(base: str | UPath):
    """The fsspec filesystem DuckDB must be given for `base`, or None when DuckDB reads it natively (local paths)."""
    base = UPath(base)
    return None if base.protocol in LOCAL_PROTOCOLS else base.fs


def view_source(base: str | UPath, asset: str, partitioned: bool, relative_to: str | Path | None = None) -> str:
    """The view's SQL. With `relative_to` (the catalog's directory), a local path is written relative to it."""
    base = UPath(base)
    target = base / asset / "*.parquet" if partitioned else base / f"{asset}.parquet"
    location = str(target.path if target.protocol in LOCAL_PROTOCOLS else target)
    if relative_to is not None and target.protocol in LOCAL_PROTOCOLS:
        location = os.path.relpath(os.path.abspath(location), os.path.abspath(relative_to))
    return f"select * from read_parquet({quote_literal(location)}, union_by_name = true)"


def quote_ident(name: str) -> str:
    """A DuckDB identifier quoted for SQL: wrapped in double quotes, embedded quotes doubled; NUL refused."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise ValueError(f"invalid SQL identifier {name!r}")
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """A SQL string literal: wrapped in single quotes, embedded quotes doubled; NUL refused."""
    if "\0" in value:
        raise ValueError(f"invalid SQL string {value[:80]!r} (contains NUL)")
    return "'" + value.replace("'", "''") + "'"


# Asset (view) names the catalog creates views for: what Dagster allows for asset keys. Anything else found under the
# base path (a directory a user or an attacker made) is skipped and reported, never spliced into SQL.
VIEW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


READONLY_PROTOCOL = "base"   # `base://<asset>/*.parquet`: the base path's Parquet as `causal-assets sql` reads it


class ReadOnlyBase(AbstractFileSystem):
    """The storage base path as an fsspec file system that can list and read and do nothing else: what the
    analysis connection serves the Parquet through, so no statement can write, whatever its wrapping.

    Paths are relative to the base (`base://corpus_chunks/default.parquet`); one that leaves it (`..`, or a local
    symlink pointing outside) is refused. Only listing, `info`, `modified` and opening for reading reach the
    underlying file system; opening for writing or appending, removing, copying, moving and making directories
    raise `PermissionError` (fsspec's defaults for the rest write nothing)."""
    protocol = (READONLY_PROTOCOL,)
    root_marker = ""
    cachable = False

    def __init__(self, base: str | UPath, **kwargs):
        super().__init__(**kwargs)
        base = UPath(base)
        self.base_protocol = base.protocol
        self.local = base.protocol in LOCAL_PROTOCOLS
        self.target = LocalFileSystem() if self.local else base.fs
        self.root = os.path.abspath(base.path) if self.local else posixpath.normpath(base.path)
        # a local base reached through a symlink: its files are named under either spelling
        self._roots = [self.root, os.path.realpath(self.root)] if self.local else [self.root]

    @classmethod
    def _strip_protocol(cls, path) -> str:
        path = stringify_path(path)
        prefix = f"{READONLY_PROTOCOL}://"
        return (path[len(prefix):] if path.startswith(prefix) else path).strip("/")

    def _target(self, path) -> str:
        """The underlying file system's path of `path`, refused when it leaves the base path."""
        rel = posixpath.normpath(self._strip_protocol(path) or ".")
        if rel == ".." or rel.startswith("../") or rel.startswith("/"):
            raise PermissionError(f"{path}: outside the base path {self.root}")
        target = self.root if rel == "." else posixpath.join(self.root, rel)
        if self.local and self._relative(os.path.realpath(target), self._roots[1:]) is None:
            raise PermissionError(f"{path}: leads outside the base path {self.root} (through a symlink)")
        return target

    def _relative(self, target: str, roots: list[str] | None = None) -> str | None:
        for root in roots or self._roots:
            if target == root:
                return ""
            if target.startswith(root.rstrip("/") + "/"):
                return target[len(root.rstrip("/")) + 1:]
        return None

    def _entry(self, entry: dict) -> dict:
        name = self._relative(self.target._strip_protocol(entry["name"]))
        if name is None:
            raise PermissionError(f"{entry['name']}: outside the base path {self.root}")
        return {**entry, "name": name}

    def url_of(self, path: str) -> str | None:
        """`base://...` for a path (local, or a URL of the base's file system) under the base path, else None."""
        if self.local:
            if "://" in path:
                return None
            full = os.path.normpath(os.path.abspath(path))
        else:
            other = UPath(path)
            if other.protocol != self.base_protocol:
                return None
            full = posixpath.normpath(other.path)
        rel = self._relative(full)
        return None if rel is None else f"{READONLY_PROTOCOL}://{rel}"

    def ls(self, path, detail=True, **kwargs):
        entries = [self._entry(e) for e in self.target.ls(self._target(path), detail=True, **kwargs)]
        return entries if detail else [e["name"] for e in entries]

    def info(self, path, **kwargs):
        return self._entry(self.target.info(self._target(path), **kwargs))

    def modified(self, path):
        return self.target.modified(self._target(path))

    def glob(self, path, **kwargs):
        # a pattern leaving the base path is refused here: the listing under it would only swallow the refusal
        # (fsspec's walk ignores errors) and match nothing
        self._target(path)
        return super().glob(path, **kwargs)

    def _open(self, path, mode="rb", **kwargs):
        if mode != "rb":
            self._refuse(path)
        return self.target.open(self._target(path), "rb")

    def _refuse(self, path, *args, **kwargs):
        raise PermissionError(f"{READONLY_PROTOCOL}://{self._strip_protocol(path)}: causal-assets sql reads the "
                              "Parquet under the base path and writes nothing")

    _rm = rm_file = cp_file = mv = mkdir = makedirs = rmdir = touch = _refuse


ANALYSIS_STATEMENTS = ("SELECT", "EXPLAIN")
_CREATE_VIEW = re.compile(r'^CREATE VIEW (?:"(?:[^"]|"")*"|\S+) AS (.*)$', re.DOTALL | re.IGNORECASE)
_PARQUET_PATH = re.compile(r"(read_parquet\()'((?:[^']|'')*)'", re.IGNORECASE)


_COMMENT = re.compile(r"\s*(?:--[^\n]*(?:\n|$)|/\*.*?\*/)", re.DOTALL)
_EXPLAIN_OPTION = re.compile(r"ANALY[SZ]E\b|\((?:[^()']|'[^']*')*\)", re.IGNORECASE)


def _after_comments(sql: str) -> str:
    """`sql` from its first word on: leading whitespace and comments (`-- ...`, `/* ... */`) skipped."""
    while True:
        m = _COMMENT.match(sql)
        if not m:
            return sql.lstrip()
        sql = sql[m.end():]


def _first_word(sql: str, default: str) -> str:
    return (_after_comments(sql).split() or [default])[0].upper()


def _explained(sql: str) -> str:
    """What an EXPLAIN statement explains: the text after `EXPLAIN` and its `ANALYZE` or `(options)`, comments
    anywhere between them skipped."""
    rest = _after_comments(sql)
    rest = _after_comments(rest[len("EXPLAIN"):]) if rest[:7].upper() == "EXPLAIN" else rest
    option = _EXPLAIN_OPTION.match(rest)
    return _after_comments(rest[option.end():]) if option else rest


def check_analysis_sql(sql: str) -> list[str]:
    """Refuse anything but queries (SELECT, EXPLAIN; `from x`, `describe`, `summarize` parse as SELECT): no COPY,
    EXPORT, INSTALL/LOAD, ATTACH, SET, PRAGMA, CREATE, ... in `causal-assets sql`. Returns the statements' texts,
    in order. A refusal names the statement's own first word, comments before it skipped."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise ValueError(f"sql: {e}") from None
    if not statements:
        raise ValueError("sql: no statement")
    for st in statements:
        kind = getattr(st.type, "name", str(st.type))
        if kind == "EXPLAIN":   # EXPLAIN ANALYZE runs what it explains: that must be a query too
            inner = _explained(st.query)
            try:
                wrapped = duckdb.extract_statements(inner)
            except duckdb.Error as e:
                raise ValueError(f"sql: {e}") from None
            if len(wrapped) != 1 or getattr(wrapped[0].type, "name", "") != "SELECT":
                raise ValueError(f"sql: only queries are allowed here, also under EXPLAIN; got EXPLAIN "
                                 f"{_first_word(inner, 'nothing')}")
            continue
        if kind not in ANALYSIS_STATEMENTS:
            # the statement's own first word: DuckDB's type of INSTALL is LOAD, of DROP ... DROP, and so on
            raise ValueError(f"sql: only queries ({', '.join(ANALYSIS_STATEMENTS)}) are allowed here; got "
                             f"{_first_word(st.query, kind)}")
    return [st.query for st in statements]


def _lock_error(e: Exception) -> bool:
    text = str(e).lower()
    return "lock" in text or "conflicting" in text


def todays_names(columns: list[str]) -> str:
    """The select list that shows a view's ids stored under old names (files written before `RENAMED_COLUMNS`) under
    today's, as `read_parquet` reads them: an old column renamed, or, where partitions of both ages are read together,
    filling the new column's gaps; "" when no column has an old name."""
    exclude, replace, rename = [], [], []
    for old, new in RENAMED_COLUMNS.items():
        if old not in columns:
            continue
        if new in columns:
            exclude.append(quote_ident(old))
            replace.append(f"coalesce({quote_ident(new)}, {quote_ident(old)}) as {quote_ident(new)}")
        else:
            rename.append(f"{quote_ident(old)} as {quote_ident(new)}")
    clauses = [f"{word} ({', '.join(items)})" for word, items in
               (("exclude", exclude), ("replace", replace), ("rename", rename)) if items]
    return f"* {' '.join(clauses)}" if clauses else ""


def view_comment(asset: str, fingerprint: str) -> str:
    return f"the {asset} asset's Parquet (causal-assets view definition {fingerprint})"


class DuckDBCatalog:
    def __init__(self, path: str | Path, lock_timeout_s: float = 2.0, base: str | UPath | None = None):
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        self._filesystems: dict[tuple, object] = {}  # fsspec filesystems registered on every connection
        if base is not None:
            self.add_filesystem(base)

    def add_filesystem(self, base: str | UPath) -> None:
        """Let DuckDB read `base` through fsspec if it cannot natively (no-op for local paths)."""
        fs = fsspec_filesystem(base)
        if fs is not None:
            protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
            self._filesystems[protocol] = fs

    @property
    def search_path(self) -> str:
        """Where relative Parquet paths of the views resolve: the catalog file's directory."""
        return str(self.path.parent.absolute())

    def view_source(self, base: str | UPath, asset: str, partitioned: bool) -> str:
        return view_source(base, asset, partitioned, relative_to=self.search_path)

    def connect(self, read_only: bool = True) -> duckdb.DuckDBPyConnection:
        """A connection to the catalog with the fsspec filesystems registered (read-only by default: it takes
        no write lock, so runs can still refresh views while you query)."""
        return self._connect(read_only)

    def _connect(self, read_only: bool, database: str | None = None) -> duckdb.DuckDBPyConnection:
        """A connection to the catalog (or to `database`, e.g. ":memory:") that resolves and reads its Parquet."""
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(database or str(self.path), read_only=read_only,
                                     config={"file_search_path": self.search_path})
                try:
                    for fs in self._filesystems.values():
                        con.register_filesystem(fs)
                except BaseException:
                    con.close()
                    raise
                return con
            except duckdb.Error as e:
                if not _lock_error(e) or time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def connect_for_analysis(self, base: str | UPath) -> duckdb.DuckDBPyConnection:
        """A connection for ad-hoc SQL (`causal-assets sql`) that can read the Parquet under `base` and write nothing.

        Read-only by construction, whatever the statement or its wrapping (EXPLAIN ANALYZE, PREPARE/EXECUTE, a
        CTE, several statements): the connection is an in-memory database whose only file system is
        `ReadOnlyBase`, an fsspec file system rooted at `base` that implements listing and reading and nothing
        else (no open for writing, no remove, no rename, no mkdir). DuckDB's own local file system is disabled,
        external access is off with `base://` the one allowed prefix, no extension can be installed or loaded
        (so no httpfs, no network), no spill directory is set, and the settings are locked, so a query cannot
        lift any of this. The catalog's views, with their comments, are copied in with their Parquet paths
        rewritten to `base://<asset>/...`; a query may also read `base://<asset>/*.parquet` itself."""
        config = {"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                  "file_search_path": self.search_path}
        with duckdb.connect(str(self.path), read_only=True, config=config) as catalog:
            views = catalog.execute("select view_name, sql, comment from duckdb_views() "
                                    "where not internal and not temporary").fetchall()
            notes = catalog.execute("select table_name, column_name, comment from duckdb_columns() "
                                    "where not internal and comment is not null").fetchall()
        readonly = ReadOnlyBase(base)
        con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                                 "autoload_known_extensions": False, "temp_directory": ""})
        try:
            con.register_filesystem(readonly)
            copied = self._copy_views(con, views, lambda m: self._base_literal(m, readonly))
            for table, column, comment in notes:
                if table in copied:
                    con.execute(f"comment on column {quote_ident(table)}.{quote_ident(column)} "
                                f"is {quote_literal(comment)}")
            con.execute(f"SET allowed_directories = [{quote_literal(READONLY_PROTOCOL + '://')}]")
            con.execute("SET disabled_filesystems = 'LocalFileSystem'")
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
        except BaseException:
            con.close()
            raise
        return con

    def _copy_views(self, con, views: list[tuple[str, str, str | None]], rewrite) -> set[str]:
        """Create `views` (name, stored SQL, comment) in `con`, each Parquet path literal replaced by `rewrite`
        (a function of the `_PARQUET_PATH` match), and return the names created. A view over another (a user's,
        in the catalog) is created after it, whatever the listing order; one whose SQL the rewrite does not
        recognise (a column list) is created as stored."""
        pending, created = list(views), set()
        while pending:
            failed = []
            for name, sql, comment in pending:
                m = _CREATE_VIEW.match(sql.strip().rstrip(";"))
                statement = (f"create view {quote_ident(name)} as "
                             + _PARQUET_PATH.sub(rewrite, m.group(1))) if m else sql
                try:
                    con.execute(statement)
                except duckdb.CatalogException:   # it reads a view not created yet
                    failed.append((name, sql, comment))
                    continue
                except duckdb.Error as e:   # its files are gone: the other views stay queryable
                    log.warning("view %s left out of the SQL session: %s", name, first_line(e))
                    continue
                if comment:
                    con.execute(f"comment on view {quote_ident(name)} is {quote_literal(comment)}")
                created.add(name)
            if len(failed) == len(pending):   # no progress: the rest read what does not exist; say why on use
                break
            pending = failed
        return created

    def _base_literal(self, match: re.Match, readonly: "ReadOnlyBase") -> str:
        """A view's Parquet path as the read-only file system names it (`base://<asset>/*.parquet`); a path
        outside the base path is left as written (reading it is refused when the view is used)."""
        path = match.group(2).replace("''", "'")
        if not os.path.isabs(path) and "://" not in path:
            path = os.path.join(self.search_path, path)
        url = readonly.url_of(path)
        return match.group(0) if url is None else match.group(1) + quote_literal(url)

    def existing_views(self) -> dict[str, str]:
        """{view: its SQL as DuckDB stores it (normalised)}."""
        return self._views("sql")

    def _views(self, column: str) -> dict[str, str]:
        if not self.path.exists():
            return {}
        with self._connect(read_only=True) as con:
            return dict(con.execute(f"select view_name, {column} from duckdb_views() "
                                    "where not internal and not temporary").fetchall())

    @staticmethod
    def _fingerprint(con, sql: str, asset: str) -> str:
        """What decides a view: its SQL, the columns it reads (their names and types: the ids shown under today's
        names and the column comments follow them) and those columns' descriptions."""
        columns = [list(map(str, r[:2])) for r in con.execute(f"describe {sql}").fetchall()]
        docs = column_docs(asset, [RENAMED_COLUMNS.get(c, c) for c, _ in columns])
        text = json.dumps([sql, asset, columns, docs], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def ensure_views(self, views: dict[str, str], docs_for: dict[str, str] | None = None) -> dict[str, str]:
        """Create or replace `name -> select` views that are missing or changed, with today's id names and column
        comments (`docs_for`: view -> the asset whose column descriptions it gets; default the view's own name).

        Returns {name: status} with status created | unchanged | deferred (catalog locked by another process); any
        other failure raises `CatalogError`.
        """
        assets = {n: (docs_for or {}).get(n, n) for n in views}
        status = {}
        try:
            # The fingerprints need no catalog connection (an in-memory one reads the Parquet): an unchanged view
            # costs a read-only look at the catalog, never the write lock.
            with self._connect(read_only=False, database=":memory:") as con:
                comments = {n: view_comment(assets[n], self._fingerprint(con, sql, assets[n]))
                            for n, sql in views.items()}
            stored = self._views("comment")
            todo = [n for n in views if stored.get(n) != comments[n]]
            status = {n: "unchanged" for n in views if n not in todo}
            if todo:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self._connect(read_only=False) as con:
                    for name in todo:
                        self._create_view(con, name, views[name], assets[name], comments[name])
                        status[name] = "created"
        except duckdb.Error as e:
            if not _lock_error(e):
                raise self._error(e) from e
            log.warning("DuckDB catalog %s is locked by another process; view refresh deferred (%s)", self.path, e)
            status.update({n: "deferred" for n in views if n not in status})
        except OSError as e:
            raise self._error(e) from e
        return status

    def _error(self, e: Exception) -> CatalogError:
        return CatalogError(f"DuckDB catalog {self.path}: views not updated ({first_line(e)}); the catalog holds "
                            "only views over the Parquet: `causal-assets catalog` rebuilds it (delete the file first "
                            "if it is damaged)")

    @staticmethod
    def _create_view(con, name: str, sql: str, asset: str, comment: str) -> None:
        view = quote_ident(name)
        columns = lambda: [r[0] for r in con.execute(   # noqa: E731
            "select column_name from duckdb_columns() where table_name = ? and not internal", [name]).fetchall()]
        con.execute(f"create or replace view {view} as {sql}")
        renamed = todays_names(columns())
        if renamed:
            con.execute(f"create or replace view {view} as select {renamed} from ({sql})")
        for column, text in column_docs(asset, columns()).items():
            con.execute(f"comment on column {view}.{quote_ident(column)} is {quote_literal(text)}")
        con.execute(f"comment on view {view} is {quote_literal(comment)}")

    def refresh_from_storage(self, base: str | UPath) -> dict[str, str]:
        """(Re)create views for every asset found under `base`: directories are partitioned assets.

        Only names that are plain identifiers (`VIEW_NAME`) become views; any other entry is reported as
        `skipped: not an asset name` (and the SQL quotes identifiers and paths anyway)."""
        base = UPath(base)
        self.add_filesystem(base)
        views, skipped = {}, {}
        if base.exists():
            for entry in sorted(base.iterdir()):
                if entry.name.startswith(".") or entry.name in ("cache",):
                    continue
                name = entry.name[:-8] if entry.name.endswith(".parquet") else entry.name
                if entry.is_dir() and any(entry.glob("*.parquet")):
                    partitioned = True
                elif entry.name.endswith(".parquet"):
                    partitioned = False
                else:
                    continue
                if not VIEW_NAME.match(name):
                    log.warning("%s: not an asset name; no view created", entry)
                    skipped[name] = "skipped: not an asset name"
                    continue
                views[name] = self.view_source(base, name, partitioned=partitioned)
        return {**skipped, **self.ensure_views(views)}
