"""Turn a proposition into an assertion.

The theory chapters check every claim of the papers with three steps, in this order:

1. **symbolic**: for an identity, ``sympy.simplify(lhs - rhs) == 0``, optionally after targeted
   rewrites (substituting a defining relation, ``expand_log``, ``powsimp`` ...). An inequality
   goes straight to step 2 unless the chapter asks for ``symbolic=True``: then SymPy's
   assumption system first tries to decide the sign of ``larger - smaller``, each variable
   written through a positive parameter that sweeps its interval (:func:`symbolic_sign`).
   ``Expr.equals`` is never used as a disproof because it is randomised.
2. **high-precision numeric**: when SymPy cannot close the claim, both sides are evaluated
   with mpmath at ``dps`` digits on a seeded grid that covers the whole stated domain, edges
   included (open edges are approached to within ``1e-12``, infinite ones out to ``1e6``).
3. otherwise the check **fails** with an ``AssertionError`` that names the claim and the worst
   point, so a false proposition (or a regression in :mod:`focalcal`) fails the book build.

Each check returns a :class:`Verdict`; a :class:`Ledger` collects a chapter's verdicts into the
table that the chapter ends with and the book's summary page shows. A claim is written as
MyST-style text whose ``$...$`` spans are TeX (``"Bernoulli: $(1-p)^\\gamma \\ge 1-\\gamma p$"``);
:func:`tex_html` turns it into HTML that MathJax typesets.

A statement the book relies on but does not check itself (a cited result) is recorded with
:func:`cited`: its status ``cited, not checked`` is counted apart from the verified ones.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import mpmath
import numpy as np
import sympy as sp

VERIFIED_SYMBOLIC = "verified (symbolic)"
VERIFIED_NUMERIC = "verified (high-precision numeric)"
VERIFIED_CORRECTED = "verified with a correction"
REFUTED = "refuted"
CITED = "cited, not checked"
STATUSES = (VERIFIED_SYMBOLIC, VERIFIED_NUMERIC, VERIFIED_CORRECTED, REFUTED, CITED)
COUNT_KEYS = dict(zip(STATUSES, ("n_symbolic", "n_numeric", "n_corrected", "n_refuted", "n_cited")))

Domain = Mapping[sp.Symbol, sp.Interval]


@dataclass
class Verdict:
    """The outcome of checking one claim."""

    claim: str
    status: str
    method: str
    detail: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


# --------------------------------------------------------------------------------------------
# step 1: symbolic
# --------------------------------------------------------------------------------------------

def symbolic_zero(expr: sp.Expr, rewrites: Sequence[Callable[[sp.Expr], sp.Expr]] = ()) -> bool:
    """True when SymPy proves ``expr == 0``; False means *not proven*, never *disproven*."""
    expr = sp.sympify(expr)
    candidates = [expr]
    for rw in rewrites:
        candidates.append(rw(candidates[-1]))
    for c in candidates:
        for simp in (sp.simplify, lambda e: sp.simplify(sp.expand(sp.together(e))),
                     lambda e: sp.simplify(sp.powsimp(sp.expand_log(e, force=True), force=True))):
            try:
                if simp(c) == 0:
                    return True
            except (TypeError, NotImplementedError, RecursionError):  # pragma: no cover - sympy internals
                continue
    return False


# --------------------------------------------------------------------------------------------
# step 2: high-precision numeric
# --------------------------------------------------------------------------------------------

_EDGE_OFFSETS = ("1e-12", "1e-6", "1e-3")
_FAR_POINTS = ("1e1", "1e3", "1e6")


def _interval_points(iv: sp.Interval, n: int, rng: np.random.Generator) -> list[mpmath.mpf]:
    lo, hi = iv.start, iv.end
    pts: list[mpmath.mpf] = []
    if lo.is_infinite and hi.is_infinite:
        pts += [mpmath.mpf(0)] + [s * mpmath.mpf(f) for f in _FAR_POINTS for s in (1, -1)]
        core = [mpmath.mpf(v) for v in rng.normal(0, 5, n)]
        return pts + core
    if hi.is_infinite:
        a = mpmath.mpf(sp.N(lo, 40))
        pts += [a + mpmath.mpf(f) for f in _FAR_POINTS]
        pts += [a] if not iv.left_open else [a + mpmath.mpf(o) for o in _EDGE_OFFSETS]
        pts += [a + mpmath.mpf(v) for v in rng.exponential(3.0, n)]
        return pts
    if lo.is_infinite:
        b = mpmath.mpf(sp.N(hi, 40))
        pts += [b - mpmath.mpf(f) for f in _FAR_POINTS]
        pts += [b] if not iv.right_open else [b - mpmath.mpf(o) for o in _EDGE_OFFSETS]
        pts += [b - mpmath.mpf(v) for v in rng.exponential(3.0, n)]
        return pts
    a, b = mpmath.mpf(sp.N(lo, 40)), mpmath.mpf(sp.N(hi, 40))
    width = b - a
    pts += [a] if not iv.left_open else [a + width * mpmath.mpf(o) for o in _EDGE_OFFSETS]
    pts += [b] if not iv.right_open else [b - width * mpmath.mpf(o) for o in _EDGE_OFFSETS]
    pts += [a + width * mpmath.mpf(k) / (n + 1) for k in range(1, n + 1)]
    pts += [a + width * mpmath.mpf(v) for v in rng.uniform(0.0, 1.0, n)]
    return pts


def domain_grid(domain: Domain, n: int = 24, seed: int = 0) -> list[dict[sp.Symbol, mpmath.mpf]]:
    """Seeded grid over a box domain ``{symbol: sympy.Interval}``, edges included.

    Per symbol: the closed endpoints themselves, points within 1e-12, 1e-6, 1e-3 (relative to the
    width) of open endpoints, points out to 1e6 on infinite sides, ``n`` equispaced interior
    points and ``n`` seeded uniform ones. Several symbols give the Cartesian product.
    """
    if not domain:
        raise ValueError("domain must name at least one symbol")
    rng = np.random.default_rng(seed)
    axes = []
    for sym, iv in domain.items():
        if not isinstance(iv, sp.Interval):
            raise ValueError(f"domain[{sym}] must be a sympy.Interval, got {iv!r}")
        axes.append(_interval_points(iv, n, rng))
    return [dict(zip(domain.keys(), combo)) for combo in itertools.product(*axes)]


def _evaluator(expr: sp.Expr, symbols: Sequence[sp.Symbol]) -> Callable[..., mpmath.mpf]:
    return sp.lambdify(list(symbols), expr, modules="mpmath")


def numeric_residuals(expr: sp.Expr, domain: Domain, *, n: int = 24, seed: int = 0,
                      dps: int = 30) -> list[tuple[dict[sp.Symbol, mpmath.mpf], mpmath.mpf]]:
    """``expr`` evaluated with mpmath at ``dps`` digits on :func:`domain_grid`."""
    symbols = list(domain.keys())
    free = sp.sympify(expr).free_symbols - set(symbols)
    if free:
        raise ValueError(f"expr has symbols {sorted(map(str, free))} that the domain does not cover")
    f = _evaluator(expr, symbols)
    out = []
    with mpmath.workdps(dps):
        for point in domain_grid(domain, n=n, seed=seed):
            try:
                out.append((point, f(*[point[s] for s in symbols])))
            except (ZeroDivisionError, ValueError, OverflowError):
                out.append((point, mpmath.mpf("nan")))  # reported as a failure by the caller
    return out


def _scale(v: mpmath.mpf) -> mpmath.mpf:
    return max(mpmath.mpf(1), abs(v))


# --------------------------------------------------------------------------------------------
# the checks a chapter calls
# --------------------------------------------------------------------------------------------

def check_identity(claim: str, lhs: sp.Expr, rhs: sp.Expr, domain: Domain, *,
                   rewrites: Sequence[Callable[[sp.Expr], sp.Expr]] = (), dps: int = 30,
                   n: int = 24, seed: int = 0, rtol: float | None = None) -> Verdict:
    """Assert ``lhs == rhs`` on ``domain``: symbolic first, then mpmath at ``dps`` digits.

    The numeric step accepts a relative residual ``|lhs - rhs| / max(1, |lhs|)`` below
    ``rtol`` (default ``10**(-(dps - 8))``) at every grid point; anything else raises
    ``AssertionError`` naming the worst point.
    """
    diff = sp.sympify(lhs) - sp.sympify(rhs)
    if symbolic_zero(diff, rewrites):
        return Verdict(claim, VERIFIED_SYMBOLIC, "sympy.simplify(lhs - rhs) == 0")
    rtol = 10.0 ** (-(dps - 8)) if rtol is None else rtol
    symbols = list(domain.keys())
    f_l, f_r = _evaluator(sp.sympify(lhs), symbols), _evaluator(sp.sympify(rhs), symbols)
    worst, worst_pt = mpmath.mpf(0), None
    with mpmath.workdps(dps):
        grid = domain_grid(domain, n=n, seed=seed)
        for point in grid:
            args = [point[s] for s in symbols]
            try:
                vl, vr = f_l(*args), f_r(*args)
                err = abs(vl - vr) / _scale(vl)
            except (ZeroDivisionError, ValueError, OverflowError) as exc:
                pt = {str(k): mpmath.nstr(v, 8) for k, v in point.items()}
                raise AssertionError(f"claim failed: {claim}: cannot evaluate at {pt} "
                                     f"({type(exc).__name__}: {exc})") from exc
            if not mpmath.isfinite(err) or err > worst:
                worst, worst_pt = err, point
                if not mpmath.isfinite(err):
                    break
    if not (mpmath.isfinite(worst) and worst <= rtol):
        pt = {str(k): mpmath.nstr(v, 8) for k, v in (worst_pt or {}).items()}
        raise AssertionError(f"claim failed: {claim}: |lhs - rhs| = {mpmath.nstr(worst, 5)} at {pt}")
    return Verdict(claim, VERIFIED_NUMERIC,
                   f"mpmath at {dps} digits on {len(grid)} grid points, max rel. residual "
                   f"{mpmath.nstr(worst, 3)}")


def _sweep_parameters(domain: Domain) -> dict[sp.Symbol, sp.Expr] | None:
    """Write each variable through a parameter ``y`` that SymPy knows to be positive.

    ``(a, oo)`` becomes ``a + y``, ``(-oo, b)`` becomes ``b - y``, ``(a, b)`` becomes
    ``a + (b - a) y / (1 + y)`` and the real line a real ``y``: each map is onto the open interval,
    so a sign that SymPy derives for every positive ``y`` holds on the whole domain. Closed
    finite endpoints are not covered by these maps, so a domain with one returns None.
    """
    subs: dict[sp.Symbol, sp.Expr] = {}
    for sym, iv in domain.items():
        if not isinstance(iv, sp.Interval):
            raise ValueError(f"domain[{sym}] must be a sympy.Interval, got {iv!r}")
        lo, hi = iv.start, iv.end
        if (lo.is_finite and not iv.left_open) or (hi.is_finite and not iv.right_open):
            return None
        if lo.is_infinite and hi.is_infinite:
            subs[sym] = sp.Dummy("y", real=True)
            continue
        y = sp.Dummy("y", positive=True)
        if hi.is_infinite:
            subs[sym] = lo + y
        elif lo.is_infinite:
            subs[sym] = hi - y
        else:
            subs[sym] = lo + (hi - lo) * y / (1 + y)
    return subs


def symbolic_sign(gap: sp.Expr, domain: Domain, *, strict: bool = False) -> bool:
    """True when SymPy proves ``gap > 0`` (``strict``) or ``gap >= 0`` on all of ``domain``.

    False means *not proven*, never *disproven*. See ``_sweep_parameters`` for how the
    domain's bounds reach SymPy's assumptions.
    """
    subs = _sweep_parameters(domain)
    if subs is None:
        return False
    expr = sp.sympify(gap).xreplace(subs)
    try:
        return bool(expr.is_positive if strict else expr.is_nonnegative)
    except (TypeError, NotImplementedError, RecursionError):  # pragma: no cover - sympy internals
        return False


def check_inequality(claim: str, smaller: sp.Expr, larger: sp.Expr, domain: Domain, *,
                     strict: bool = False, dps: int = 30, n: int = 24, seed: int = 0,
                     atol: float = 0.0, symbolic: bool = False) -> Verdict:
    """Assert ``smaller <= larger`` (``<`` if ``strict``) everywhere on ``domain``.

    mpmath at ``dps`` digits on :func:`domain_grid`: any grid point with
    ``larger - smaller < -atol`` (``<= atol`` if ``strict``) fails the check. With
    ``symbolic=True`` (and ``atol == 0``) SymPy is tried first (:func:`symbolic_sign`, rarely
    conclusive) and a proof gives a ``verified (symbolic)`` verdict. It is off by default so that
    a chapter's verdicts do not move with what a SymPy release's assumption system can decide.
    """
    gap = sp.sympify(larger) - sp.sympify(smaller)
    if symbolic and atol == 0.0 and symbolic_sign(gap, domain, strict=strict):
        return Verdict(claim, VERIFIED_SYMBOLIC,
                       "sympy: the sign of larger - smaller follows from the domain's assumptions")
    residuals = numeric_residuals(gap, domain, n=n, seed=seed, dps=dps)
    bad = [(p, v) for p, v in residuals
           if not mpmath.isfinite(v) or (v <= atol if strict else v < -atol)]
    if bad:
        p, v = min(bad, key=lambda pv: pv[1] if mpmath.isfinite(pv[1]) else mpmath.mpf("-inf"))
        pt = {str(k): mpmath.nstr(x, 8) for k, x in p.items()}
        raise AssertionError(f"claim failed: {claim}: larger - smaller = {mpmath.nstr(v, 5)} at {pt}")
    smallest = min(v for _, v in residuals)
    return Verdict(claim, VERIFIED_NUMERIC,
                   f"mpmath at {dps} digits on {len(residuals)} grid points, min gap "
                   f"{mpmath.nstr(smallest, 3)}")


def check_close(claim: str, value: float, expected: float, *, rtol: float = 1e-6,
                atol: float = 0.0, method: str = "computed value") -> Verdict:
    """Assert a computed number matches a stated one (``|v - e| <= atol + rtol |e|``)."""
    v, e = float(value), float(expected)
    if not abs(v - e) <= atol + rtol * abs(e):
        raise AssertionError(f"claim failed: {claim}: computed {v!r}, expected {e!r} "
                             f"(rtol={rtol:g}, atol={atol:g})")
    return Verdict(claim, VERIFIED_NUMERIC, f"{method}: {v:.6g} vs stated {e:.6g}")


def check_true(claim: str, condition: bool, *, method: str, detail: str = "",
               status: str = VERIFIED_NUMERIC) -> Verdict:
    """Assert a boolean outcome computed by the chapter (e.g. a counterexample exists)."""
    if not bool(condition):
        raise AssertionError(f"claim failed: {claim}: {method}" + (f" ({detail})" if detail else ""))
    return Verdict(claim, status, method, detail)


def cited(claim: str, *, reference: str, detail: str = "") -> Verdict:
    """Record a statement the chapter relies on but does not check (status ``cited, not checked``).

    Nothing is asserted: the ledger shows the row for what it is and counts it apart from the
    verified claims (``n_cited``).
    """
    if not reference:
        raise ValueError("reference must name where the statement is proved")
    return Verdict(claim, CITED, f"cited from {reference}; not checked here", detail)


# --------------------------------------------------------------------------------------------
# rendering: claims with $...$ TeX as HTML that MathJax typesets
# --------------------------------------------------------------------------------------------

def tex_html(text: str) -> str:
    r"""HTML for text whose ``$...$`` spans are TeX: the text is escaped, each span becomes
    ``<span class="math">\(...\)</span>``, the markup Sphinx gives inline math (MathJax
    typesets it, also inside a cell's output or a pasted glue value).

    >>> tex_html(r"if $p < 1/2$ then $\gamma > 0$")
    'if <span class="math notranslate nohighlight">\\(p &lt; 1/2\\)</span> then <span class="math notranslate nohighlight">\\(\\gamma &gt; 0\\)</span>'
    """
    parts = str(text).split("$")
    if len(parts) % 2 == 0:
        raise ValueError(f"unbalanced $ in {text!r}")
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            if not part.strip():
                raise ValueError(f"empty $...$ in {text!r}")
            out.append(f'<span class="math notranslate nohighlight">\\({html.escape(part, quote=False)}\\)</span>')
        else:
            out.append(html.escape(part, quote=False))
    return "".join(out)


_BADGES = {
    VERIFIED_SYMBOLIC: ("&#10003; symbolic", "#1a7f37"),
    VERIFIED_NUMERIC: ("&#10003; numeric", "#1a7f37"),
    VERIFIED_CORRECTED: ("&#10003; with a correction", "#9a6700"),
    REFUTED: ("&#10007; refuted", "#cf222e"),
    CITED: ("cited, not checked", "#57606a"),
}
_DETAIL_LABEL = {VERIFIED_CORRECTED: "Correction", REFUTED: "Counterexample"}
_TABLE_STYLE = ("width:100%;table-layout:fixed;border-collapse:collapse;font-size:0.85em;"
                "line-height:1.35")
_CELL_STYLE = "padding:0.35em 0.5em;vertical-align:top;border-top:1px solid #d0d7de;text-align:left"


def verdicts_html(verdicts: Sequence[Verdict], *, numbers: Sequence[int | None] | None = None) -> str:
    """The verdicts as an HTML table for a reader: number, claim (with its correction or
    counterexample below it), verdict, and how it was checked; claims, details and methods may
    contain ``$...$`` TeX (see :func:`tex_html`). ``numbers`` label the rows (default 1, 2, ...;
    None leaves a row unnumbered)."""
    if numbers is None:
        numbers = range(1, len(verdicts) + 1)
    head = "".join(f'<th style="{_CELL_STYLE};border-top:none">{h}</th>'
                   for h in ("", "claim", "verdict", "how it is checked"))
    rows = []
    for i, v in zip(numbers, verdicts):
        badge, colour = _BADGES[v.status]
        claim = tex_html(v.claim)
        if v.detail:
            label = _DETAIL_LABEL.get(v.status, "Detail")
            claim += (f'<div style="margin-top:0.25em;color:#57606a"><em>{label}:</em> '
                      f"{tex_html(v.detail)}</div>")
        rows.append(f'<tr data-status="{html.escape(v.status)}">'
                    f'<td style="{_CELL_STYLE};color:#57606a">{"" if i is None else i}</td>'
                    f'<td style="{_CELL_STYLE};overflow-x:auto">{claim}</td>'
                    f'<td style="{_CELL_STYLE};color:{colour};font-weight:600">{badge}</td>'
                    f'<td style="{_CELL_STYLE};color:#57606a">{tex_html(v.method)}</td></tr>')
    cols = "".join(f'<col style="width:{w}">' for w in ("2.2em", "58%", "7.5em", "auto"))
    return (f'<table class="verdicts" style="{_TABLE_STYLE}"><colgroup>{cols}</colgroup>'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


# --------------------------------------------------------------------------------------------
# a chapter's ledger
# --------------------------------------------------------------------------------------------

@dataclass
class Ledger:
    """The verdicts of one chapter, shown as a table and glued into the summary page.

    >>> ledger = Ledger("Komisarenko & Kull (2024)")
    >>> v = ledger.add(check_true("1 + 1 = 2", 1 + 1 == 2, method="arithmetic"))
    >>> ledger.table()[["source", "claim", "status"]].shape
    (1, 3)
    """

    source: str
    verdicts: list[Verdict] = field(default_factory=list)

    def add(self, verdict: Verdict, *, status: str | None = None, detail: str | None = None) -> Verdict:
        """Record ``verdict``; ``status``/``detail`` override it (e.g. ``VERIFIED_CORRECTED``)."""
        if status is not None:
            verdict = Verdict(verdict.claim, status, verdict.method, verdict.detail, verdict.source)
        if detail is not None:
            verdict.detail = detail
        verdict.source = self.source
        self.verdicts.append(verdict)
        return verdict

    def extend(self, verdicts: Iterable[Verdict]) -> None:
        for v in verdicts:
            self.add(v)

    def record(self, verdicts: Iterable[Verdict]):
        """Add ``verdicts`` and return their table for display (see :meth:`show`)."""
        verdicts = list(verdicts)
        self.extend(verdicts)
        return self.show(verdicts)

    def table(self):
        """The verdicts as a ``pandas.DataFrame`` (columns source, claim, status, method, detail)."""
        import pandas as pd

        rows = [asdict(v) for v in self.verdicts]
        return pd.DataFrame(rows, columns=["source", "claim", "status", "method", "detail"])

    def counts(self) -> dict[str, int]:
        """Number of claims per status, keyed ``n_claims``, ``n_symbolic``, ``n_numeric``,
        ``n_corrected``, ``n_refuted``, ``n_cited``."""
        out = {"n_claims": len(self.verdicts), **{k: 0 for k in COUNT_KEYS.values()}}
        for v in self.verdicts:
            out[COUNT_KEYS[v.status]] += 1
        return out

    def html(self, verdicts: Sequence[Verdict] | None = None) -> str:
        """The verdicts (all of them, or ``verdicts``) as the HTML table of :func:`verdicts_html`,
        each numbered by its place in the ledger (unnumbered if not added yet)."""
        if verdicts is None:
            return verdicts_html(self.verdicts)
        place = {id(v): i for i, v in enumerate(self.verdicts, 1)}
        return verdicts_html(verdicts, numbers=[place.get(id(v)) for v in verdicts])

    def show(self, verdicts: Iterable[Verdict] | int | None = None):
        """Display a verdict table in a notebook: the whole ledger, the given verdicts, or (an
        int) the last ``n`` added."""
        from IPython.display import HTML

        if isinstance(verdicts, int):
            verdicts = self.verdicts[-verdicts:]
        return HTML(self.html(None if verdicts is None else list(verdicts)))

    def glue(self) -> None:
        """Glue the table (key ``verdicts``) and the counts for the book's summary page.

        The summary page pastes them with ``{glue:text}`page.md::n_claims``` and
        ``:doc: page.md``; only call this inside a notebook executed by myst-nb.
        """
        from IPython.display import HTML
        from myst_nb import glue

        glue("verdicts", HTML(self.html()), display=False)
        for key, n in self.counts().items():
            glue(key, n, display=False)
