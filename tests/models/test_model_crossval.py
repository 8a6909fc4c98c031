"""Cross-validation by kernel: folds never leak a test kernel, every kernel is scored once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from modelkit import tiny_config

from xla_costmodel.models.crossval import cross_validate, kernel_folds
from xla_costmodel.models.synthetic import write_tree
from xla_costmodel.tpugraphs.metrics import TILE_KEYS


def fake_files(n_rankable: int, n_other: int) -> tuple[list[Path], list[Path]]:
    rankable = [Path(f"k/kernel{i}.npz") for i in range(n_rankable)]
    other = [Path(f"k/single{i}.npz") for i in range(n_other)]
    return sorted(rankable + other), rankable


@pytest.mark.parametrize("k", [None, 2, 3, 7, 50])
def test_folds_partition_the_rankable_kernels_without_leaks(k: int | None) -> None:
    files, rankable = fake_files(7, 3)
    folds = kernel_folds(files, rankable, k)
    assert len(folds) == (7 if k is None else min(k, 7))
    tested = Counter(p for _, test in folds for p in test)
    assert set(tested) == set(rankable) and set(tested.values()) == {1}
    for train, test in folds:
        assert test and not set(train) & set(test)
        assert set(train) | set(test) == set(files)  # everything else trains
        assert all(p in train for p in files if p not in rankable)


def test_leave_one_out_tests_one_kernel_per_fold() -> None:
    files, rankable = fake_files(4, 1)
    assert [len(test) for _, test in kernel_folds(files, rankable)] == [1, 1, 1, 1]


def test_folds_do_not_depend_on_the_file_order() -> None:
    files, rankable = fake_files(7, 2)
    forward = kernel_folds(files, rankable, 3)
    backward = kernel_folds(files[::-1], rankable[::-1], 3)
    assert [sorted(t) for _, t in forward] == [sorted(t) for _, t in backward]


def test_fewer_than_two_rankable_kernels_cannot_be_cross_validated() -> None:
    files, rankable = fake_files(1, 2)
    with pytest.raises(ValueError, match="at least 2"):
        kernel_folds(files, rankable)


def test_cross_validate_scores_every_kernel_with_a_model_that_never_saw_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xla_costmodel.models.crossval

    trained_on: list[list[Path]] = []

    def recording_fit(train, *args):  # type: ignore[no-untyped-def]
        trained_on.append(list(train))
        return fit(train, *args)

    fit = xla_costmodel.models.crossval.fit
    monkeypatch.setattr(xla_costmodel.models.crossval, "fit", recording_fit)
    files = write_tree(
        tmp_path, "tile", "train", 3, seed=0, num_nodes=8, num_configs=12
    )
    report = cross_validate(
        files, files, tiny_config("tile", epochs=1), tmp_path / "cv"
    )
    held_out = [set(files) - set(train) for train in trained_on]
    assert sorted(p for fold in held_out for p in fold) == sorted(files)
    assert all(len(fold) == 1 for fold in held_out)
    assert report["method"] == "leave-one-kernel-out" and report["folds"] == 3
    assert [row["graph"] for row in report["graphs"]] == [p.stem for p in files]
    for fold in range(3):
        log = (tmp_path / "cv" / f"fold{fold}" / "train_log.jsonl").read_text()
        assert log.count("\n") == 1  # fixed epochs, no validation, no early stopping
    assert set(TILE_KEYS) <= set(report["mean"])
    assert set(report["baselines"]) == {"random", "default"}


def test_files_of_one_graph_are_tested_together_and_never_trained_on() -> None:
    """default/ and random/ hold the same program under the same name: one graph."""
    a, b = Path("default/g.npz"), Path("random/g.npz")
    files, rankable = fake_files(3, 1)
    files, rankable = [*files, a, b], [*rankable, a, b]
    graphs = {p: p.stem for p in files}  # a and b share the graph id "g"
    for k in (None, 2):
        folds = kernel_folds(files, rankable, k, graphs)
        assert len(folds) == (4 if k is None else 2)
        for train, test in folds:
            assert not {graphs[p] for p in train} & {graphs[p] for p in test}
        assert sum({a, b} <= set(test) for _, test in folds) == 1


def test_cross_validate_groups_copies_by_graph_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy of a kernel under another folder is the same graph: one fold tests both,
    and no fold trains on one while testing the other."""
    import xla_costmodel.models.crossval

    trained_on: list[list[Path]] = []

    def recording_fit(train, *args):  # type: ignore[no-untyped-def]
        trained_on.append(list(train))
        return fit(train, *args)

    fit = xla_costmodel.models.crossval.fit
    monkeypatch.setattr(xla_costmodel.models.crossval, "fit", recording_fit)
    files = write_tree(tmp_path, "tile", "train", 3, num_nodes=8, num_configs=12)
    copy = tmp_path / "elsewhere" / files[0].name
    copy.parent.mkdir()
    copy.write_bytes(files[0].read_bytes())
    files.append(copy)
    report = cross_validate(
        files, files, tiny_config("tile", epochs=1), tmp_path / "cv"
    )
    assert report["folds"] == 3 and len(report["graphs"]) == 4
    pair = {files[0], copy}
    assert [len(pair & set(train)) for train in trained_on].count(0) == 1
    assert all(len(pair & set(train)) in (0, 2) for train in trained_on)
