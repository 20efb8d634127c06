"""The papers' experimental claims (:mod:`focalcal_book.claims`): every quote is the paper's own words."""

from __future__ import annotations

from pathlib import Path

import pytest

from focalcal_book import claims
from focalcal_book import verdicts as vd


@pytest.fixture(scope="module")
def papers(shared_data_root) -> Path:
    """The plain-text copies of the papers, beside the published logits (as test_released reads them)."""
    return shared_data_root.parent / "papers"


@pytest.mark.parametrize("key", sorted(claims.CLAIMS))
def test_every_quote_is_in_its_paper(key, papers):
    c = claims.CLAIMS[key]
    assert claims.normalised(c.quote) in claims.paper_text(c.paper, papers), (
        f"{key}: the quote is not in {claims.PAPER_FILES[c.paper]}")


def test_a_misquote_is_caught(papers):
    text = claims.paper_text("zhou2025", papers)
    assert claims.normalised("achieving the best cwECE in every case") not in text


def test_normalised_ignores_emphasis_quotes_and_whitespace():
    assert claims.normalised("*both before and after*\n temperature") == "both before and after temperature"
    assert claims.normalised("“FL-53” – x") == '"fl-53" - x'


def test_tally_records_glues_and_renders():
    t = claims.Tally()
    assert t.add("zhou_best_cwece", vd.NOT_TRAINED, "lowest mean cwECE, $z$ over seeds") == vd.NOT_TRAINED
    html = t.html()
    assert "achieving the best cwECE" in html and "Zhou et al., App. E.3" in html and vd.NOT_TRAINED in html
    assert t.verdicts == {"zhou_best_cwece": vd.NOT_TRAINED}
    with pytest.raises(ValueError, match="twice"):
        t.add("zhou_best_cwece", vd.HOLDS, "again")
    with pytest.raises(ValueError, match="key"):
        t.add("no_such_claim", vd.HOLDS, "rule")
    with pytest.raises(ValueError, match="verdict"):
        t.add("zhou_ts_improves", "probably", "rule")


def test_tally_cases_are_rows_of_their_own():
    t = claims.Tally()
    t.add("zhou_ts_improves", vd.HOLDS, "paired", case="selective-risk (released)")
    t.add("zhou_ts_improves", vd.NOT_TRAINED, "paired", case="selective-risk")
    assert t.verdicts == {"zhou_ts_improves__selective_risk_released": vd.HOLDS,
                          "zhou_ts_improves__selective_risk": vd.NOT_TRAINED}
    assert "[selective-risk (released)]" in t.html()
    with pytest.raises(ValueError, match="twice"):
        t.add("zhou_ts_improves", vd.HOLDS, "again", case="selective-risk")


def test_claim_rejects_an_unknown_paper():
    with pytest.raises(ValueError, match="paper"):
        claims.Claim("guo2017", "Sec. 1", "x")
