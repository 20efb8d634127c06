"""Issue 21, item 7: the lab's command line as a user meets it (``python -m focalcal.lab.sweep``)."""

from __future__ import annotations

import re

import pytest

from focalcal.lab import profiles, sweep


def test_profile_defaults_to_cpu(tmp_path, capsys, monkeypatch):
    """``--list`` without ``--profile`` lists the cpu profile, as the README says (the default)."""
    monkeypatch.chdir(tmp_path)
    assert sweep.main(["--list"]) == 0
    ids = [line.split()[-1] for line in capsys.readouterr().out.splitlines()[1:]]
    assert ids == [r.run_id for r in profiles.get_profile("cpu").expand()]


@pytest.mark.parametrize("profile, shrunk", [("smoke", False), ("cpu", False), ("gpu", True),
                                             ("gpu", False), ("paper", False)])
def test_list_rows_tell_the_runs_apart(tmp_path, profile, shrunk):
    """No two rows of ``--list`` read the same but for the run id, and each loss has one label
    across the roles (the profiles' display labels differ: 'focal (gamma=3)', 'focal-3', ...)."""
    p = profiles.get_profile(profile, shrunk=shrunk)
    runs = p.expand()
    roles = p.roles()
    header, *rows = sweep.list_table(runs, tmp_path, roles)
    assert header[:6] == ("status", "role", "dataset", "network", "loss", "seed")
    assert len(rows) == len(runs)
    shown = [row[:-1] for row in rows]
    assert len(set(shown)) == len(shown), [r for r in shown if shown.count(r) > 1][:2]
    labels: dict[tuple, set[str]] = {}
    for r, row in zip(runs, rows):
        labels.setdefault((r.loss.name, repr(r.loss.params)), set()).add(row[4])
        assert row[1] in roles or "," in row[1]
        assert any(r.run_id in roles[role] for role in row[1].split(","))
    assert all(len(v) == 1 for v in labels.values()), labels


def test_smoke_list_labels_focal_gamma_3_once(tmp_path, capsys):
    assert sweep.main(["--profile", "smoke", "--list", "--out", str(tmp_path)]) == 0
    cells = {c for line in capsys.readouterr().out.splitlines() for c in re.split(r"\s{2,}", line)}
    assert "focal(gamma=3)" in cells
    assert not cells & {"focal (gamma=3)", "focal gamma=3", "focal-3"}


def test_calibration_table_marks_a_selection_at_the_edge_of_its_grid():
    """The post-hoc template's table (``calibrate``'s rows) marks what the lab's grids hide from
    the SearchRangeWarning: logits that predict their labels perfectly select the sharpest T."""
    import warnings

    import torch

    from focalcal.lab.results import calibrate

    g = torch.Generator().manual_seed(0)
    z = 4 * torch.randn(400, 3, generator=g, dtype=torch.float64)
    y = z.argmax(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning is turned into the note, not shown
        cal = calibrate(z[:200], y[:200], z[200:], y[200:], temperatures=[0.5, 1.0, 2.0],
                        gammas=[0.0, 1.0])
    table = cal.frame()
    for method in ("TS (NLL)", "focal TS (NLL)"):
        assert "temperature=0.5 (lower edge)" in table.loc[method, "at_edge"], table["at_edge"]
    assert table.loc["uncalibrated", "at_edge"] == "" and table.loc["Psi", "at_edge"] == ""
    # an interior selection carries no note
    y_noisy = torch.multinomial(torch.softmax(z / 4, 1), 1, generator=g).squeeze(1)
    cal = calibrate(z[:200], y_noisy[:200], z[200:], y_noisy[200:],
                    temperatures=[0.25, 0.5, 1, 2, 4, 8, 16, 32])
    assert cal.frame().loc["TS (NLL)", "at_edge"] == ""
