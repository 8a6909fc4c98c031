"""Durability settings and failures: every database failure is ``StoreUnavailable``."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from storekit import batch, gid, layout_configs, layout_graph

from xla_costmodel.service.store import MeasurementStore, StoreError, StoreUnavailable
from xla_costmodel.service.store import default_sqlite_url as sqlite_url
from xla_costmodel.service.store.engine import WRITE, create_store_engine


def saved_layout(store: MeasurementStore) -> str:
    arrays = layout_graph()
    store.save_graph(gid(arrays), "layout", arrays)
    return gid(arrays)


def test_sqlite_commits_durably(tmp_path: Path) -> None:
    store = MeasurementStore.open(sqlite_url(tmp_path / "data"))
    assert (tmp_path / "data" / "costmodel.db").is_file()
    with store.engine.connect() as conn:
        pragma = {
            name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
        }
    assert pragma == {
        "journal_mode": "wal",
        "synchronous": 2,
        "foreign_keys": 1,
        "busy_timeout": 10_000,
    }
    store.close()


def test_postgres_urls_get_psycopg_and_pre_ping() -> None:
    engine = create_store_engine("postgresql://user@db.invalid/costmodel")
    assert engine.url.drivername == "postgresql+psycopg"
    assert engine.pool._pre_ping  # type: ignore[attr-defined]
    engine.dispose()
    with pytest.raises(StoreError, match="unsupported database 'mysql'"):
        create_store_engine("mysql://user@host/db")


def test_postgres_outage_is_unavailable_then_recovers(
    postgres_server: Any, postgres_url: str
) -> None:
    store = MeasurementStore.open(postgres_url)
    graph = saved_layout(store)
    store.add_measurements(batch(graph, layout_configs(4)))  # pooled connections
    postgres_server.shutdown()
    calls = [
        lambda: store.add_measurements(batch(graph, layout_configs(4))),
        lambda: store.generation("layout", "tpu-v3", graph),
        store.ping,
        lambda: MeasurementStore.open(postgres_url),
    ]
    for call in calls:
        start = time.monotonic()
        with pytest.raises(StoreUnavailable, match="postgresql database unavailable"):
            call()
        assert time.monotonic() - start < 5
    postgres_server.start()
    store.add_measurements(batch(graph, layout_configs(4)))  # stale pool: pre-ping
    assert store.generation("layout", "tpu-v3", graph)[0] == 8
    store.close()


def test_unreachable_postgres_fails_fast() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for url in (
        f"postgresql://postgres@127.0.0.1:{port}/costmodel",  # refused
        "postgresql://postgres@10.255.255.1:5432/costmodel",  # no answer: 2 s timeout
    ):
        start = time.monotonic()
        with pytest.raises(StoreUnavailable, match="postgresql database unavailable"):
            MeasurementStore.open(url)
        assert time.monotonic() - start < 5, url


def test_sqlite_in_an_unusable_location_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreUnavailable, match="cannot create data directory"):
        sqlite_url(blocker / "data")
    with pytest.raises(StoreUnavailable, match="cannot create"):
        MeasurementStore.open(f"sqlite:///{blocker}/data/costmodel.db")
    with pytest.raises(StoreUnavailable, match="unable to open database file"):
        MeasurementStore.open(f"sqlite:///{tmp_path}")  # a directory, not a file


def test_a_read_only_sqlite_database_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "costmodel.db"
    store = MeasurementStore.open(f"sqlite:///{path}")
    graph = saved_layout(store)
    store.close()
    # Root ignores file modes, so the database is opened read-only instead.
    readonly = MeasurementStore.open(
        f"sqlite:///file:{path}?mode=ro&uri=true", migrate=False
    )
    assert readonly.has_graph(graph)
    with pytest.raises(StoreUnavailable, match="readonly database"):
        readonly.add_measurements(batch(graph, layout_configs(2)))
    readonly.close()


def test_a_full_sqlite_database_is_unavailable(tmp_path: Path) -> None:
    store = MeasurementStore.open(sqlite_url(tmp_path))
    graph = saved_layout(store)

    def cap_size(dbapi_connection: Any, _record: Any) -> None:
        pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

    event.listen(store.engine, "connect", cap_size)
    store.engine.dispose()  # reconnect with the cap: the disk is now "full"
    with pytest.raises(StoreUnavailable, match="database or disk is full"):
        store.add_measurements(batch(graph, layout_configs(500)))
    assert store.generation("layout", "tpu-v3", graph) == (0, 0)  # rolled back
    store.close()


def test_a_locked_sqlite_database_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "xla_costmodel.service.store.engine.SQLITE_BUSY_TIMEOUT_MS", 200
    )
    url = sqlite_url(tmp_path)
    store = MeasurementStore.open(url)
    graph = saved_layout(store)
    other = MeasurementStore.open(url)
    with other.engine.execution_options(**{WRITE: True}).begin():
        # another writer holds the lock (BEGIN IMMEDIATE) and does not let go
        start = time.monotonic()
        with pytest.raises(StoreUnavailable, match="database is locked"):
            store.add_measurements(batch(graph, layout_configs(2)))
        assert time.monotonic() - start < 5
    assert store.add_measurements(batch(graph, layout_configs(2))).stored == 2
    store.close()
    other.close()
