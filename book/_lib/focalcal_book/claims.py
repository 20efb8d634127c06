"""The papers' experimental claims, typed once with their quotes and locations, and a page's tally of them.

An experiment page tests claims the papers make about experiments. Each such claim lives here once,
in :data:`CLAIMS`: the paper (its bibliography key), where it is (section, figure or table), and the
words the paper uses, verbatim (``tests/test_claims.py`` finds every quote in the plain-text copy of
its paper in ``shared/papers``). A page keeps a :class:`Tally`: for each claim it tests, the rule
it applies (Markdown, naming any threshold and whose it is) and the verdict that rule computed
(:data:`focalcal_book.verdicts.VERDICTS`). :meth:`Tally.glue` glues each verdict word as
``verdict_<key>`` so that the page's prose states it (``{glue:md}`verdict_<key>```), and
:meth:`Tally.show` ends the page with the table of every claim, its quote, rule and verdict.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

from focalcal_book.verdicts import VERDICTS

__all__ = ["Claim", "CLAIMS", "PAPER_FILES", "Tally", "normalised", "paper_text"]

#: the plain-text copy of each paper in ``shared/papers``
PAPER_FILES = {
    "mukhoti2020": "mukhoti-2020-calibrating-with-focal-loss.txt",
    "charoenphakdee2021": "charoenphakdee-2021-focal-loss-posterior-estimation.txt",
    "komisarenko2024": "komisarenko-kull-2024-focal-temperature-scaling.txt",
    "zhou2025": "zhou-2025-reweighted-risk-aurc-focal-inverse-focal.txt",
    "kimura2024": "focal-loss-curvature-geometric-view.txt",
}
#: the papers' short names in the claim tables
_AUTHORS = {"mukhoti2020": "Mukhoti et al.", "charoenphakdee2021": "Charoenphakdee et al.",
            "komisarenko2024": "Komisarenko & Kull", "zhou2025": "Zhou et al.",
            "kimura2024": "Kimura & Naganuma"}


@dataclass(frozen=True)
class Claim:
    """One experimental claim of a paper: ``paper`` (bibliography key), ``location`` and the ``quote``."""

    paper: str
    location: str
    quote: str

    def __post_init__(self) -> None:
        if self.paper not in PAPER_FILES:
            raise ValueError(f"paper must be one of {sorted(PAPER_FILES)}, got {self.paper!r}")

    @property
    def source(self) -> str:
        """``"Mukhoti et al., Sec. 5.1"``."""
        return f"{_AUTHORS[self.paper]}, {self.location}"


def _claims(*rows: tuple[str, str, str, str]) -> dict[str, Claim]:
    out: dict[str, Claim] = {}
    for key, paper, location, quote in rows:
        if key in out:
            raise ValueError(f"claim key {key!r} is typed twice")
        out[key] = Claim(paper, location, quote)
    return out


_M, _C, _K, _Z, _H = "mukhoti2020", "charoenphakdee2021", "komisarenko2024", "zhou2025", "kimura2024"
#: every experimental claim a page tests, by key (the key is the page's handle on it)
CLAIMS: dict[str, Claim] = _claims(
    # Zhou et al. (2025): their selective-risk loss and the losses they compare it with
    ("zhou_best_cwece", _Z, "App. E.3",
     "achieving the best cwECE in the majority of cases"),
    ("zhou_ts_improves", _Z, "App. E.3",
     "its calibration performance can be further enhanced with TS on the CIFAR-10/100 datasets"),
    ("zhou_good_calibration", _Z, "Sec. 5",
     "loss demonstrates good calibration performance compared to baseline methods"),
    ("zhou_dual_strong", _Z, "Sec. 5",
     "Dual Focal loss exhibits strong performance across all datasets and models"),
    ("zhou_focal_variable", _Z, "Sec. 5",
     "focal loss and inverse focal loss are more variable, depending on both the model architecture and dataset"),
    ("zhou_csf_sensitive", _Z, "Sec. 5, Fig. 2",
     "exhibits noticeable sensitivity to the choice of CSF in most scenarios"),
    ("zhou_inverse_large_gamma", _Z, "App. E.1, Fig. 4a",
     "consistently underperform, which should not be considered in practice"),
    ("zhou_fl53_poor_cwece", _Z, "App. E.3",
     "FL-53 performs poorly relative to other trainable methods on both CIFAR-10 and Tiny-ImageNet"),
    # Charoenphakdee et al. (2021): psi_capacity
    ("charoen_best_gamma", _C, "Sec. 6.2",
     "we can conclude that the best $\\gamma$ increases as the data size decreases or the model becomes "
     "more complex"),
    ("charoen_less_effective", _C, "Sec. 6.2",
     "$\\Psi^\\gamma$ becomes less effective as the dataset size gets smaller"),
    ("charoen_psi_hurts", _C, "Sec. 6.2",
     "it worsens the performance for **Standard** in CIFAR10"),
    ("charoen_psi_most", _C, "Sec. 6.1",
     "We can see that $\\Psi^\\gamma$ substantially improves ECE for most settings"),
    ("charoen_tsfl_degrades", _C, "Sec. 6.1",
     "in **TS<sub>FL</sub>**, if $\\Psi^\\gamma$ is not applied, we can see that ECE-raw degrades "
     "compared with that of **Standard**"),
    ("charoen_tsfl_always", _C, "Sec. 6.2, Fig. 6",
     "a larger $\\gamma$ always leads to worse performance and $\\Psi^\\gamma$ can effectively mitigate "
     "this problem for every dataset"),
    ("charoen_ls_always", _C, "Sec. 6.2, Fig. 6",
     "For **LS** and **TS<sub>FL</sub>**, we observe that a larger  $\\gamma$  always leads to worse performance"),
    # Kimura & Naganuma (2024): curvature_measured
    ("kimura_lambda_monotone", _H, "Fig. 2",
     "For all architectures, λmax(Hval) monotonically decreases with increasing γ"),
    ("kimura_ece_minimum", _H, "Fig. 2",
     "ECE reaches its minimum for ViT architecture around γ = 10 and for other architectures around γ = 3, 4"),
    ("kimura_tau_lowers", _H, "Fig. 4",
     "Higher τ values resulted in lower ECE and smaller Tr(Hval)"),
    # pages mukhoti_fmnist and fmnist_focal_ts: Mukhoti et al. (2020) and Komisarenko & Kull (2024)
    ("mukhoti_flsd53_lowest", _M, "Sec. 5.1",
     "It broadly produces the lowest ECE and AdaECE values both before and after temperature scaling"),
    ("mukhoti_nll_overfit", _M, "Sec. 4, Fig. 3a",
     "the test NLL for the cross-entropy model significantly increases towards the end of training "
     "(before saturating), whereas the NLLs for the focal loss models remain low"),
    ("mukhoti_weight_norm", _M, "Sec. 4, Fig. 3e",
     "as the networks start to become miscalibrated, the weight norm for the cross-entropy model also "
     "starts to become greater than those for the focal loss models"),
    ("mukhoti_entropy", _M, "Sec. 4, Fig. 3d",
     "the entropy of the softmax distribution for misclassified test samples is consistently (if "
     "marginally) higher for focal loss than for cross-entropy"),
    ("mukhoti_flsd53_t_near_one", _M, "Sec. 5.1",
     "the optimal temperatures are very close to 1, mostly lying between 0.9 and 1.1"),
    ("mukhoti_baseline_t_high", _M, "Sec. 5.1",
     "the optimal temperatures for the baselines (cross-entropy with hard targets and MMCE) are "
     "significantly higher, with values lying between 2.0 to 2.8"),
    ("mukhoti_feature_norm", _M, "App. G, Fig. 10",
     "cross-entropy has the highest feature norm, followed by focal loss with $\\gamma = 1$"),
    ("mukhoti_grad_norm", _M, "Sec. 4, Fig. 4",
     "the gradient norms for focal loss are consistently lower than those for cross-entropy throughout training"),
    ("mukhoti_nll_correct", _M, "Sec. 4, Fig. 3b",
     "remain consistently higher than that for the cross-entropy model throughout training"),
    ("mukhoti_nll_incorrect_rise", _M, "Sec. 4, Fig. 3c",
     "the rise in this value for the focal loss models is much less severe"),
    ("mukhoti_gamma_order", _M, "App. E",
     "We found $\\gamma = 3$ to produce the best ECE among models trained using a fixed $\\gamma$"),
    ("mukhoti_entropy_falls", _M, "Sec. 3, Fig. 2",
     "the entropies of the softmax distributions for both the correctly and incorrectly classified *test* samples "
     "decrease throughout training"),
    ("mukhoti_nll_only_incorrect", _M, "Sec. 3, Fig. 2",
     "the increase in average test NLL is caused only by the incorrectly classified samples"),
    ("mukhoti_s99_pre", _M, "App. F, Table 13",
     "for the focal loss model is much lower than for the cross-entropy or MMCE models before temperature scaling"),
    ("mukhoti_s99_post", _M, "App. F, Table 13",
     "after temperature scaling,  $|S99|$  for focal loss is significantly higher than for both MMCE and cross-entropy"),
    ("mukhoti_ls_005", _M, "Sec. 5.1",
     "we train models using smoothing factors  $\\alpha = 0.05$  and  $\\alpha = 0.1$  but find  $\\alpha = 0.05$  to "
     "perform better"),
    # page mukhoti_linear: Mukhoti et al.'s linear model (App. B)
    ("mukhoti_linear_norms", _M, "App. B, Fig. 7",
     "the norm of the logits and the weights of a network blows for Cross Entropy as compared to Focal Loss"),
    ("mukhoti_linear_regions", _M, "App. B, Fig. 8",
     "running gradient descent with cross-entropy (CE) and focal loss (FL) both gives the same decision regions"),
    ("mukhoti_linear_mistakes", _M, "App. B, Fig. 8",
     "CE misclassifies almost always with greater than 90% confidence whereas FL misclassifies with much lower "
     "confidence"),
    ("mukhoti_ece_rises_late", _M, "Sec. 3, Fig. 2",
     "after epoch 150, the test set ECE rises, indicating that the network is becoming miscalibrated"),
    ("kk_fts_improves", _K, "Sec. 5.2",
     "focal temperature scaling could noticeably improve ECE among all baseline models"),
    ("kk_t_decreases", _K, "Sec. 5.2",
     "The optimal temperature generally decreases with the growth of the focal training parameter γ_{tr}"),
    ("kk_gamma_ece", _K, "Sec. 5.2", "Models trained with higher γ_{tr} have generally better ECE"),
    ("kk_gamma_accuracy", _K, "Sec. 5.2", "have generally better ECE but worse accuracy"),
    ("kk_choice_ece", _K, "Sec. 5.2",
     "When evaluating ECE, we could gain an extra 20% relative improvement in average when optimizing for ECE "
     "on the validation set for the hyperparameter choice"),
    ("kk_choice_nll", _K, "Sec. 5.2", "For log-loss, the relative improvement is rather minor but consistent: around 1%"),
)


def _plain(quote: str) -> str:
    """A quote for display: the paper's Markdown emphasis and HTML subscripts dropped (TeX kept)."""
    return re.sub(r"<sub>(.*?)</sub>", r"_\1", quote.replace("**", ""))


def normalised(text: str) -> str:
    """``text`` for quote matching: Markdown emphasis and soft hyphens dropped, typographic quotes
    and dashes made plain, whitespace collapsed, lower case."""
    text = text.replace("\u00ad", "").replace("*", "").replace("_", "")
    text = text.translate(str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
                                         "\u2013": "-", "\u2014": "-"}))
    return re.sub(r"\s+", " ", text).strip().lower()


def paper_text(paper: str, papers_dir: str | Path) -> str:
    """The normalised plain text of ``paper`` (a key of :data:`PAPER_FILES`) from ``papers_dir``."""
    if paper not in PAPER_FILES:
        raise ValueError(f"paper must be one of {sorted(PAPER_FILES)}, got {paper!r}")
    return normalised((Path(papers_dir) / PAPER_FILES[paper]).read_text(encoding="utf-8"))


class Tally:
    """The claims one page tests: for each, the rule applied and the verdict it computed."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[str, str | None, str, str]] = {}

    def add(self, key: str, verdict: str, rule: str, *, case: str | None = None) -> str:
        """Record claim ``key``'s ``verdict`` under ``rule`` (Markdown); returns the verdict.

        ``case`` names one reading of the claim when a page tests it several times (e.g. one loss
        variant each): its row then reads "(case)" after the quote, and it is glued as
        ``verdict_<key>__<case>`` (the case's non-alphanumerics as ``_``).

        Raises
        ------
        ValueError
            ``key`` is not in :data:`CLAIMS`, is recorded twice (for the same ``case``), or
            ``verdict`` is not a verdict.
        """
        if key not in CLAIMS:
            raise ValueError(f"key must be a claim of focalcal_book.claims.CLAIMS, got {key!r}")
        name = key if case is None else f"{key}__{re.sub(r'[^0-9A-Za-z]+', '_', case).strip('_')}"
        if name in self._rows:
            raise ValueError(f"claim {name!r} is recorded twice on this page")
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {list(VERDICTS)}, got {verdict!r}")
        self._rows[name] = (key, case, verdict, rule)
        return verdict

    @property
    def verdicts(self) -> dict[str, str]:
        """Glue name (the claim's key, ``key__case`` for a case) -> verdict, in the order recorded."""
        return {name: v for name, (_, _, v, _) in self._rows.items()}

    def glue(self) -> None:
        """Glue each verdict, in bold, as ``verdict_<key>`` (for ``{glue:md}`` in the prose)."""
        from IPython.display import Markdown
        from myst_nb import glue

        for name, (_, _, verdict, _) in self._rows.items():
            glue(f"verdict_{name}", Markdown(f"**{verdict}**"), display=False)

    def html(self) -> str:
        """The table: claim (quote and where), rule, verdict."""
        from focalcal_book.verify import tex_html

        head = "".join(f"<th style='text-align:left;padding:0.3em 0.6em'>{h}</th>"
                       for h in ("claim (the paper's words)", "rule applied here", "verdict"))
        rows = []
        for key, case, verdict, rule in self._rows.values():
            c = CLAIMS[key]
            reading = f" <strong>[{html.escape(case)}]</strong>" if case else ""
            rows.append(f"<tr><td style='padding:0.3em 0.6em'>“{tex_html(_plain(c.quote))}” "
                        f"<em>({html.escape(c.source)})</em>{reading}</td>"
                        f"<td style='padding:0.3em 0.6em'>{tex_html(rule)}</td>"
                        f"<td style='padding:0.3em 0.6em'><strong>{html.escape(verdict)}</strong></td></tr>")
        return ("<table class='claims' style='border-collapse:collapse;font-size:0.9em'>"
                f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")

    def show(self):
        """The table as HTML output of the cell."""
        from IPython.display import HTML

        return HTML(self.html())
