"""``costmodel tokens`` and ``costmodel measurements purge`` on a real SQLite file."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from xla_costmodel.cli import build_app
from xla_costmodel.service.store import MeasurementStore

runner = CliRunner()


def run(*argv: str) -> tuple[int, str, str]:
    result = runner.invoke(build_app(), list(argv))
    return result.exit_code, result.stdout, result.stderr


def test_the_token_is_the_last_line_of_stdout_and_shown_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db' / 'costmodel.db'}"
    code, out, err = run("tokens", "list", "--database-url", url)
    assert code == 1 and "no database" in err  # never creates an empty one
    code, out, err = run(
        "tokens", "create", "tuner-1", "--target", "tpu-v3", "--database-url", url
    )
    assert code == 0, err
    (token,) = out.splitlines()  # alone on stdout; the words went to stderr
    assert token.startswith("cmw_") and "tuner-1" in err and token not in err
    store = MeasurementStore.open(url)
    try:
        found = store.writers.authenticate(token)
        assert found is not None and found.targets == ("tpu-v3",)
    finally:
        store.close()
    code, out, err = run("tokens", "create", "tuner-1", "--database-url", url)
    assert code == 1 and "exists" in err and not out
    code, out, _ = run("tokens", "list", "--database-url", url)
    assert code == 0 and "tuner-1" in out and "tpu-v3" in out and token not in out
    assert run("tokens", "revoke", "tuner-1", "--database-url", url)[0] == 0
    code, _, err = run("tokens", "revoke", "tuner-1", "--database-url", url)
    assert code == 1 and "no active writer" in err
    code, out, _ = run(
        "measurements", "purge", "--writer", "tuner-1", "--database-url", url
    )
    assert code == 0 and out.splitlines()[-1] == "0"
    code, _, err = run("tokens", "create", "bad name", "--database-url", url)
    assert code == 2 and "writer name" in err
