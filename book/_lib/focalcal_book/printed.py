"""The papers' own numbers for the released networks, typed once, each with its source.

The pages of the "Released models" part print these beside the numbers computed from the released
logits (:mod:`focalcal.lab.results.released`); nothing else on those pages is typed by hand.

Sources (the plain-text copies in ``shared/papers/``; the page numbers of the PDFs do not survive in
them, so each table is located by its section and by the line of its caption in that copy):

- Mukhoti et al. (2020), "Calibrating Deep Neural Networks using Focal Loss", arXiv:2002.09437v1:
  Tables 1 and 2 (Sec. 5), Tables 4 and 9-12 (App. E), Table 13 (App. F). We type the "Brier
  Loss" and "FLSD-53" columns of the rows of the 12 released networks (FLSD-53 only on CIFAR-10:
  its CIFAR-100 networks were not released). Percentages as printed; ``T`` as printed.
- Zhou et al. (2025), "Revisiting Reweighted Risk for Calibration": Table 1 (accuracy, ECE),
  Table 2 (cwECE, raw and after TS) and App. Table 4 (adaptive ECE, raw and after TS), row
  "CIFAR-10 ResNet50", columns XE, FL-53, Dual, KDE-XE and AURC; means over three seeds.

Every value is the number as printed (a percentage for Mukhoti's tables and Zhou's Table 1 and
App. Table 4; ``x 10^2`` for Zhou's Table 2), with the number of decimals printed, which is the
rounding that :func:`decimals` returns and the pages compare to.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Source", "SOURCES", "MUKHOTI", "FL3_TEMPERATURE", "ZHOU", "printed_rows", "decimals"]


@dataclass(frozen=True)
class Source:
    """Where a printed table is: paper (bibliography key), table, section, caption line in shared/papers."""

    paper: str
    table: str
    section: str
    line: int
    what: str

    @property
    def cite(self) -> str:
        """``"Table 1 (Sec. 5)"``."""
        return f"{self.table} ({self.section})"


_M, _Z = "mukhoti2020", "zhou2025"
SOURCES: dict[str, Source] = {
    "M1": Source(_M, "Table 1", "Sec. 5", 181, "ECE (%), 15 equal-width bins, pre / post T, T in brackets"),
    "M2": Source(_M, "Table 2", "Sec. 5", 197, "AdaECE (%), 15 equal-mass bins, pre / post T"),
    "M4": Source(_M, "Table 4", "App. E", 425, "error (%)"),
    "M9": Source(_M, "Table 9", "App. E", 501, "NLL (%) pre T"),
    "M10": Source(_M, "Table 10", "App. E", 522, "NLL (%) post T (T cross-validated on ECE)"),
    "M11": Source(_M, "Table 11", "App. E", 537, "MCE (%) pre T"),
    "M12": Source(_M, "Table 12", "App. E", 552, "MCE (%) post T"),
    "M8": Source(_M, "Table 8", "App. E", 486, "top-1 and top-5 accuracy (%), 'Brier Loss' column"),
    "M13": Source(_M, "Table 13", "App. F", 561, "|S99| (%) and accuracy on S99 (%), 'Focal Loss' column"),
    "M5": Source(_M, "Table 5", "App. E", 441, "ECE (%) of the focal-loss variants, post T with T in brackets"),
    "Z1": Source(_Z, "Table 1", "Sec. 5", 267, "accuracy (%) and ECE (%), equal-width bins"),
    "Z2": Source(_Z, "Table 2", "Sec. 5", 303, "cwECE x 10^2, raw and after TS (T selected on the training set)"),
    "Z4": Source(_Z, "App. Table 4", "App. E.3", 672, "adaptive ECE (%), raw and after TS"),
}

# --------------------------------------------------------------------------------------------
# Mukhoti et al. (2020): one row per released network, (quantity, table key) -> printed value
# --------------------------------------------------------------------------------------------
# Table 1 and Table 2: (pre T, post T, T); Table 4: error; Tables 9/10: NLL pre/post; 11/12: MCE pre/post
_T1 = {  # ECE pre, ECE post, T
    "cifar10_resnet50_brier": ("1.82", "1.08", "1.1"), "cifar10_resnet110_brier": ("2.56", "1.25", "1.2"),
    "cifar10_wide_resnet_brier": ("1.25", "1.25", "1"), "cifar10_densenet121_brier": ("1.53", "1.53", "1"),
    "cifar100_resnet50_brier": ("6.52", "3.64", "1.1"), "cifar100_resnet110_brier": ("7.88", "4.65", "1.2"),
    "cifar100_wide_resnet_brier": ("4.31", "2.7", "1.1"), "cifar100_densenet121_brier": ("5.17", "2.29", "1.1"),
    "cifar10_resnet50_flsd53": ("1.55", "0.95", "1.1"), "cifar10_resnet110_flsd53": ("1.87", "1.07", "1.1"),
    "cifar10_wide_resnet_flsd53": ("1.56", "0.84", "0.9"), "cifar10_densenet121_flsd53": ("1.22", "1.22", "1"),
}
_T2 = {  # AdaECE pre, AdaECE post, T
    "cifar10_resnet50_brier": ("1.74", "1.23", "1.1"), "cifar10_resnet110_brier": ("2.6", "1.7", "1.2"),
    "cifar10_wide_resnet_brier": ("1.7", "1.7", "1"), "cifar10_densenet121_brier": ("2.03", "2.03", "1"),
    "cifar100_resnet50_brier": ("6.52", "3.64", "1.1"), "cifar100_resnet110_brier": ("7.73", "4.53", "1.2"),
    "cifar100_wide_resnet_brier": ("4.22", "2.81", "1.1"), "cifar100_densenet121_brier": ("5.04", "2.56", "1.1"),
    "cifar10_resnet50_flsd53": ("1.56", "1.26", "1.1"), "cifar10_resnet110_flsd53": ("2.07", "1.67", "1.1"),
    "cifar10_wide_resnet_flsd53": ("1.52", "1.38", "0.9"), "cifar10_densenet121_flsd53": ("1.42", "1.42", "1"),
}
_APPENDIX = {  # error (T4), NLL pre (T9), NLL post (T10), MCE pre (T11), MCE post (T12)
    "cifar10_resnet50_brier": ("5.0", "18.67", "18.36", "31.54", "22.46"),
    "cifar10_resnet110_brier": ("5.48", "20.44", "19.60", "25.18", "22.73"),
    "cifar10_wide_resnet_brier": ("4.08", "15.85", "15.85", "77.15", "77.15"),
    "cifar10_densenet121_brier": ("5.11", "19.11", "19.11", "19.39", "19.39"),
    "cifar100_resnet50_brier": ("23.39", "99.63", "99.57", "36.75", "21.61"),
    "cifar100_resnet110_brier": ("25.1", "110.72", "111.81", "24.85", "13.56"),
    "cifar100_wide_resnet_brier": ("20.59", "84.62", "85.77", "14.68", "13.42"),
    "cifar100_densenet121_brier": ("23.75", "98.31", "98.74", "15.47", "8.55"),
    "cifar10_resnet50_flsd53": ("4.98", "17.55", "17.37", "14.89", "26.37"),
    "cifar10_resnet110_flsd53": ("5.42", "18.54", "18.24", "18.95", "17.35"),
    "cifar10_wide_resnet_flsd53": ("4.01", "14.55", "14.23", "74.07", "36.56"),
    "cifar10_densenet121_flsd53": ("5.46", "18.39", "18.39", "13.36", "13.36"),
}
# Table 13, "Focal Loss" column (the text around it: "focal loss ... with an optimal temperature of
# 1.1", the FLSD-53 temperature of both networks in Table 1): |S99| pre, accuracy pre, |S99| post, accuracy post
_T13 = {
    "cifar10_resnet110_flsd53": ("61.41", "99.51", "31.10", "99.68"),
    "cifar10_resnet50_flsd53": ("46.31", "99.57", "14.27", "99.93"),
}


# Table 8, "Brier Loss" column (the only loss released on CIFAR-100): top-1, top-5 accuracy
_T8 = {
    "cifar100_resnet50_brier": ("76.61", "93.24"), "cifar100_resnet110_brier": ("74.9", "92.44"),
    "cifar100_wide_resnet_brier": ("79.41", "94.56"), "cifar100_densenet121_brier": ("76.25", "92.76"),
}


# Table 5, column FL-3 (focal loss with gamma = 3 fixed, not released): its temperatures on the two
# networks of Table 13, the other focal loss that Table 13's "Focal Loss" column may be
FL3_TEMPERATURE = {"cifar10_resnet50": ("1.1", "M5"), "cifar10_resnet110": ("1.1", "M5")}


def _mukhoti() -> dict[str, dict[str, tuple[str, str]]]:
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for net in _T1:
        row = dict(zip(("ece_pre", "ece_post", "temperature"), ((v, "M1") for v in _T1[net])))
        row.update(zip(("adaece_pre", "adaece_post", "temperature_adaece"), ((v, "M2") for v in _T2[net])))
        row.update(zip(("error", "nll_pre", "nll_post", "mce_pre", "mce_post"),
                       zip(_APPENDIX[net], ("M4", "M9", "M10", "M11", "M12"))))
        row.update(zip(("top1", "top5"), ((v, "M8") for v in _T8.get(net, ()))))
        row.update(zip(("s99_pre", "s99_acc_pre", "s99_post", "s99_acc_post"),
                       ((v, "M13") for v in _T13.get(net, ()))))
        out[net] = row
    return out


#: network -> quantity -> (printed value as text, source key of :data:`SOURCES`)
MUKHOTI: dict[str, dict[str, tuple[str, str]]] = _mukhoti()

# --------------------------------------------------------------------------------------------
# Zhou et al. (2025): CIFAR-10 ResNet50 row; accuracy and ECE (Table 1), cwECE raw / TS / T (Table 2),
# adaptive ECE raw / TS / T (App. Table 4)
# --------------------------------------------------------------------------------------------
_ZHOU_ROWS = {
    "cifar10_resnet50_ce_zhou": (("94.51", "3.00"), ("0.665", "0.486", "1.3"), ("2.97", "1.98", "1.3")),
    "cifar10_resnet50_flsd53_zhou": (("93.58", "3.98"), ("0.881", "0.825", "1.0"), ("3.92", "3.61", "1.0")),
    "cifar10_resnet50_dual_focal_zhou": (("94.09", "1.27"), ("0.478", "0.636", "1.1"), ("1.21", "1.98", "1.1")),
    "cifar10_resnet50_ece_kde_zhou": (("94.46", "3.09"), ("0.677", "0.499", "1.3"), ("3.07", "2.04", "1.3")),
    "cifar10_resnet50_aurc_zhou": (("93.32", "2.53"), ("0.575", "0.430", "1.2"), ("2.42", "1.10", "1.2")),
}


def _zhou() -> dict[str, dict[str, tuple[str, str]]]:
    out = {}
    for net, (t1, t2, t4) in _ZHOU_ROWS.items():
        row = dict(zip(("accuracy", "ece"), ((v, "Z1") for v in t1)))
        row.update(zip(("cwece_raw", "cwece_ts", "temperature_cw"), ((v, "Z2") for v in t2)))
        row.update(zip(("adaece_raw", "adaece_ts", "temperature_ada"), ((v, "Z4") for v in t4)))
        out[net] = row
    return out


#: network -> quantity -> (printed value as text, source key of :data:`SOURCES`)
ZHOU: dict[str, dict[str, tuple[str, str]]] = _zhou()

def decimals(text: str) -> int:
    """Decimals printed in ``text`` (``"1.08"`` -> 2, ``"1"`` -> 0)."""
    return len(text.split(".", 1)[1]) if "." in text else 0


def printed_rows(table: dict[str, dict[str, tuple[str, str]]]):
    """One row per printed number: network, quantity, value (float), text, decimals, source."""
    import pandas as pd

    rows = [{"network": net, "quantity": q, "value": float(text), "text": text, "decimals": decimals(text),
             "source": key, "cite": SOURCES[key].cite}
            for net, row in table.items() for q, (text, key) in row.items()]
    return pd.DataFrame(rows)
