"""Each entry's protocol, declared as data in one place, hashed; the log of its amendments.

**The declaration** (:func:`declaration`) of an entry is what it was set to measure before a result
is seen: the quick profile's configuration exactly as the registry builds it
(``registry.get(id).config("quick")``: the stand-in data, model, partition, rounds, the rate grid
and tuning rule, the deviations from the paper's recipe), where the configuration has a rate grid
the tuning rule's defaults (:mod:`bnfl.experiments.tuning`: tuning seeds, validation share, the
grid's edge rule), its seeds, and for each of its headline
claims (:data:`bnfl.experiments.headlines.HEADLINES`) the paper's statement it tests
(``paper_effect``, quoted with its table or figure), the stand-in, the threshold's rule
(``threshold_reason``), where the threshold comes from (:data:`THRESHOLD_SOURCES`: a CATALOG
constant is called *the CATALOG's choice*), the null, the units and the precondition claim.

**The hash** (:func:`protocol_hash`) is the first 16 hex digits of the SHA-256 of the declaration as
canonical JSON (keys sorted, no spaces; :func:`bnfl.experiments.core.config_hash`). It holds no
measured number (a threshold the entry computes from its own runs enters as its rule, not its
value), no absolute path, no row number (rows can be reordered without changing what a claim tests),
no display title (``topic``) and no code fingerprint (a change to bnfl that leaves the declaration as
it was is not an amendment; ``config_hash`` tracks the code). Every new result stores the hash it
ran under (:func:`bnfl.experiments.runner.run` writes ``protocol_hash``: the declaration built from
the configuration and seeds that actually ran, so an override or another seed count stores another
hash).

**The log** (:data:`LOG_PATH`, JSON) records each amendment of a headline row's protocol: date,
commits, row, entry and claim, what changed, why (and whether it was decided after the earlier
result was seen), and the verdict before and after with their measured intervals; an amendment made
after the declarations existed also names ``from_hash`` and ``to_hash``. Its ``stamp`` records
record hashes written into results after the fact. :func:`unrecorded` lists the stored results whose
hash is neither their declaration's nor reached from it by a logged amendment.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bnfl.experiments import calibration, tuning
from bnfl.experiments.core import _jsonable, config_hash
from bnfl.experiments.headlines import HEADLINES, Headline
from bnfl.experiments.registry import get

__all__ = ["CATALOG_CHOICE", "CLAIM_RULES", "LOG_PATH", "PROFILE", "THRESHOLD_SOURCES", "amendments", "amendments_markdown",
           "declaration", "paper_protocols_markdown", "load_log", "protocol_cell", "protocol_hash", "row_amendments", "threshold_source", "unrecorded",
           "validate_log"]

#: The profile whose protocol is declared (the committed results' profile).
PROFILE = "quick"
#: The protocol log of the repository's committed results.
LOG_PATH = Path(__file__).resolve().parents[2] / "figures" / "PROTOCOL-LOG.json"

#: What a threshold that is a constant of papers/CATALOG.md (not derived from the paper's effect or
#: the stand-in's damage) is called wherever it is shown.
CATALOG_CHOICE = "the CATALOG's choice"
_DIRECTION = "direction only"
_ROOM = "derived: the paper's damage as a share of the room above chance, on the stand-in's room"
_RULE = ("derived by the calibration's rule: the paper's effect scaled to the damage the entry measures "
         "(bnfl.experiments.calibration.scaled_effect)")
_CALIBRATED_RULE = ("derived by the calibration's rule: the paper's effect scaled to the damage the stand-in's BN-only "
                    "calibration measured before any fix ran (bnfl.experiments.calibration.rule_threshold)")
_SHARE_RULE = ("derived by the calibration's rule for a share of the damage: the share the paper's fix repairs "
               "(bnfl.experiments.calibration.rule_share)")

#: Where each headline threshold comes from, by ``(entry, claim)``: :data:`CATALOG_CHOICE`, direction
#: only (0, or the null), or derived by a stated rule.
THRESHOLD_SOURCES: dict[tuple[str, str], str] = {
    ("fedtan-fig3", "b-fedavg+bn"): _ROOM,
    ("fedtan-tab1", "fair-fedtan-gap"): _RULE,
    ("fedtan-fig4", "fair-iid-both"): CATALOG_CHOICE,
    ("fedtan-fig4", "fair-fedbn"): _DIRECTION,
    ("fedtan-tab2", "every-cell"): _DIRECTION,
    ("hbn-tab1", "hbn-best-Q-DIG phi=0.1"): _DIRECTION,
    ("hbn-tab1", "hbn-vs-bn-Q-DIG phi=0.1"): _CALIBRATED_RULE,
    ("hbn-tab2", "drop-0.6"): _CALIBRATED_RULE,
    ("hbn-tab2", "hbn-ge-bn-0.6-B2"): _DIRECTION,
    ("hbn-tab4", "gains"): CATALOG_CHOICE,
    ("hbn-tab6", "moving-average-worst"): _DIRECTION,
    ("fixbn-tab1", "bn-gap"): _ROOM,
    ("fixbn-fig1", "fair-fixbn-closes"): _SHARE_RULE,
    ("fixbn-fig1", "star"): CATALOG_CHOICE,
    ("fixbn-fig4", "fixbn-local-E1"): _DIRECTION,
    ("fixbn-fig3", "conv-every-partition"): _DIRECTION,
    ("fixbn-tab5", "fixbn-best"): _DIRECTION,
    ("fedbn-tab11", "fedbn-best-mean"): _DIRECTION,
    ("fedbn-tab1", "office-best-mean"): _DIRECTION,
    ("fedbn-fig3", "fair-faster"): CATALOG_CHOICE,
    ("fedbn-fig4", "fair-a-E16"): _DIRECTION,
    ("fedbn-tab17", "fedbn-fedprox-thin"): CATALOG_CHOICE,
    ("bench-bn-fixes", "label-skew-fedtan"): _RULE,
    ("bench-bn-fixes", "feature-shift-fedbn"): _RULE,
}


#: The counted claims (not the reported-only ones) outside the headline whose threshold an entry derives from its own runs by a
#: rule (not a constant in its code): ``{entry: {claim: (rule, the headline claim whose paper effect it
#: scales, or None)}}``. Declared with the entry (:func:`declaration`), so a change of the rule, or of
#: the paper's effect and damage it scales, changes the entry's hash. A test finds every stored claim
#: whose statement names such a rule and fails where it is not declared here or in the headline.
CLAIM_RULES: dict[str, dict[str, tuple[str, tuple[str, str] | None]]] = {
    "fedtan-fig3": {"b-scaffold": (_ROOM, None)},
    "fedtan-fig4": {"fedtan-gap": (_RULE, ("fedtan-tab1", "fair-fedtan-gap")),
                    "fedtan-gap-pytorch-init": (_RULE, ("fedtan-tab1", "fair-fedtan-gap"))},
    "fedtan-tab1": {"fedtan-gap": (_RULE, ("fedtan-tab1", "fair-fedtan-gap")),
                    "fedtan-gap-pytorch-init": (_RULE, ("fedtan-tab1", "fair-fedtan-gap"))},
}


def _claim_rules(entry_id: str) -> dict[str, Any]:
    """:data:`CLAIM_RULES` of ``entry_id`` as declared data: each claim's rule and, where it scales a
    paper effect, that effect and damage as :data:`bnfl.experiments.calibration.EFFECTS` holds them."""
    out: dict[str, Any] = {}
    for claim, (rule, scales) in sorted(CLAIM_RULES.get(entry_id, {}).items()):
        rec: dict[str, Any] = {"rule": rule}
        if rule == _ROOM:  # the share of the paper's damage and the paper's chance, as the rule's defaults hold them
            params = inspect.signature(calibration.headroom_share).parameters
            rec["defaults"] = {k: params[k].default for k in ("fraction", "paper_chance")}
        if scales is not None:
            e = calibration._effect_of(*scales)
            rec["scales"] = {"entry": scales[0], "claim": scales[1], "effect": e.effect, "damage": e.damage}
        out[claim] = rec
    return out


def threshold_source(headline: Headline) -> str:
    """Where ``headline``'s threshold comes from (:data:`THRESHOLD_SOURCES`)."""
    try:
        return THRESHOLD_SOURCES[(headline.entry, headline.claim)]
    except KeyError:
        raise KeyError(f"headline {headline.entry}/{headline.claim} has no threshold source: add it to "
                       "bnfl.experiments.protocols.THRESHOLD_SOURCES") from None


def _claim_declaration(h: Headline) -> dict[str, Any]:
    pre = h.precondition
    return {"claim": h.claim, "paper_effect": h.paper_effect, "stand_in": h.stand_in,
            "threshold_reason": h.threshold_reason, "threshold_source": threshold_source(h), "null": h.null,
            "units": h.units, "repair": h.repair,
            "precondition": None if pre is None else {"what": pre.what, "claim": pre.claim},
            **({"tested": h.tested} if h.tested else {}),
            **({"other_stand_ins": [{"claim": o.claim, "stand_in": o.stand_in, "precondition": o.precondition}
                                    for o in h.others]} if h.others else {})}


def declaration(entry_id: str, *, profile: str = PROFILE, config: Mapping[str, Any] | None = None,
                seeds: Sequence[int] | None = None) -> dict[str, Any]:
    """The protocol of ``entry_id`` as plain JSON-able data (what :func:`protocol_hash` hashes).

    ``config`` and ``seeds`` default to ``profile``'s as the registry declares them; the runner
    passes what actually ran.
    """
    entry = get(entry_id)
    if config is None:
        config = entry.config(profile)
    if seeds is None:
        seeds = range(int(entry.default_seeds.get(profile, 1)))
    out = {"entry": entry_id, "profile": profile, "config": _jsonable(dict(config)), "seeds": [int(s) for s in seeds],
           "claims": [_claim_declaration(h) for h in HEADLINES if h.entry == entry_id]}
    if entry_id in CLAIM_RULES:  # thresholds of counted claims outside the headline, derived by a rule
        out["claim_rules"] = _claim_rules(entry_id)
    if '"grid"' in json.dumps(out["config"]):  # a rate grid: the tuning rule's defaults, where the config is silent
        out["tuning_rule"] = {"seeds": list(tuning.TUNE_SEEDS), "validation": tuning.VALIDATION,
                              "extend": tuning.EXTEND, "edge_rule": tuning.EDGE_RULE}
    return out


def protocol_hash(entry_id: str, *, profile: str = PROFILE, config: Mapping[str, Any] | None = None,
                  seeds: Sequence[int] | None = None) -> str:
    """16 hex digits identifying :func:`declaration` (canonical JSON, SHA-256)."""
    return config_hash(declaration(entry_id, profile=profile, config=config, seeds=seeds))


# ------------------------------------------------------------------------------------------ the log

_REQUIRED = ("id", "date", "commits", "row", "entry", "claim", "what", "why", "before", "after")
_SIDE = ("commit", "claim", "verdict", "estimate", "low", "high", "seeds")
#: What an amendment of whole entries (``entry_amendment``, e.g. A12's seed counts) records per entry.
_ENTRY_SIDE = ("entry", "from_hash", "to_hash", "verdict_before", "verdict_after")


#: A side that counts items (each with its own interval) instead of holding one interval.
_COUNT_SIDE = ("commit", "claim", "verdict", "count", "seeds", "items")
_ITEM = ("claim", "verdict", "estimate", "low", "high", "seeds")


def _holds(label: str, rec: Mapping[str, Any]) -> list[str]:
    low, est, high = rec.get("low"), rec.get("estimate"), rec.get("high")
    if all(isinstance(x, (int, float)) for x in (low, est, high)) and not low <= est <= high:
        return [f"{label} interval {est} [{low}, {high}] does not hold its estimate"]
    return []


def load_log(path: str | Path | None = None) -> dict[str, Any]:
    """The protocol log (``{"amendment": [...], "stamp": [...]}``); empty lists where the file is absent."""
    path = LOG_PATH if path is None else Path(path)
    if not path.is_file():
        return {"amendment": [], "stamp": []}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); fix the line it names") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds no JSON object; it needs {{\"amendment\": [...], \"stamp\": [...]}}")
    data.setdefault("amendment", [])
    data.setdefault("stamp", [])
    return data


def validate_log(log: Mapping[str, Any]) -> list[str]:
    """One line per problem of the log's schema (empty when every amendment has its fields)."""
    problems: list[str] = []
    for i, a in enumerate(log.get("amendment", [])):
        name = a.get("id", f"amendment {i + 1}")
        problems += [f"{name}: no {k!r}" for k in _REQUIRED if a.get(k) in (None, "", [])]
        for side in ("before", "after"):
            rec = a.get(side)
            if not isinstance(rec, Mapping):
                continue
            if "items" in rec:  # a count over items (row 10: one interval per FL solver), not one interval
                problems += [f"{name}: {side} has no {k!r}" for k in _COUNT_SIDE if rec.get(k) in (None, "", [])]
                for j, item in enumerate(rec.get("items") or []):
                    label = f"{name}: {side} item {item.get('claim', j + 1)}"
                    problems += [f"{label} has no {k!r}" for k in _ITEM if item.get(k) in (None, "")]
                    problems += _holds(label, item)
                continue
            problems += [f"{name}: {side} has no {k!r}" for k in _SIDE if rec.get(k) in (None, "")]
            problems += _holds(f"{name}: {side}", rec)
    for a in log.get("entry_amendment", []):
        name = a.get("id", "an entry amendment")
        problems += [f"{name}: no {k!r}" for k in ("id", "date", "commits", "what", "why", "entries")
                     if a.get(k) in (None, "", [])]
        for e in a.get("entries", []):
            problems += [f"{name}, {e.get('entry', '?')}: no {k!r}" for k in _ENTRY_SIDE if e.get(k) in (None, "")]
    ids = [a.get("id") for a in log.get("amendment", []) + log.get("entry_amendment", [])]
    problems += [f"amendment id {x!r} appears {ids.count(x)} times" for x in sorted(set(ids), key=str)
                 if ids.count(x) > 1]
    return problems


def amendments(log: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The log's amendments, in the order written (oldest first)."""
    return list((load_log() if log is None else log).get("amendment", []))


def row_amendments(headline: Headline, log: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The amendments of ``headline`` (same entry; its claim before or after, followed back through
    the amendments that moved the row from one claim to another), oldest first."""
    mine = [a for a in amendments(log) if a.get("entry") == headline.entry]
    names = {headline.claim}
    while True:  # the claims the row held before a logged move to a claim it holds since
        more = {a.get("claim") for a in mine if a.get("after", {}).get("claim") in names} - names - {None}
        if not more:
            break
        names |= more
    return [a for a in mine if a.get("claim") in names or a.get("after", {}).get("claim") in names]


def unrecorded(results: Iterable[Any], log: Mapping[str, Any] | None = None) -> list[str]:
    """One line per stored result whose ``protocol_hash`` differs from its entry's declaration
    (:func:`protocol_hash`) with no chain of logged amendments (``from_hash`` -> ``to_hash``) from
    the stored hash to the declared one; a result with no hash is listed too."""
    edges: dict[tuple[str, str], str] = {}
    log = load_log() if log is None else log
    for a in amendments(log):
        if a.get("from_hash") and a.get("to_hash"):
            edges[(a["entry"], a["from_hash"])] = a["to_hash"]
    for a in log.get("entry_amendment", []):
        for e in a.get("entries", []):
            edges[(e["entry"], e["from_hash"])] = e["to_hash"]
    problems = []
    for r in results:
        stored = getattr(r, "protocol_hash", "") or ""
        declared = protocol_hash(r.id, profile=r.profile or PROFILE)
        if not stored:
            problems.append(f"{r.id}: the result stores no protocol_hash (declared {declared})")
            continue
        seen, h = set(), stored
        while h != declared and (r.id, h) in edges and h not in seen:
            seen.add(h)
            h = edges[(r.id, h)]
        if h != declared:
            problems.append(f"{r.id}: ran under protocol {stored}, its declaration is now {declared}, and no "
                            f"amendment in {LOG_PATH.name} records {stored} -> {declared}")
    return problems


# ------------------------------------------------------------------------------------ what a reader sees

def _side(rec: Mapping[str, Any]) -> str:
    if "items" in rec:  # a count over items: the count, then each item's interval
        items = ", ".join(f"{i['claim']} {i['estimate']:+.2f} [{i['low']:.2f}, {i['high']:.2f}]" for i in rec["items"])
        return f"{rec['verdict']}, {rec['count']}: {items} ({rec['seeds']} seeds, {rec['commit']})"
    return (f"{rec['verdict']} {rec['estimate']:+.2f} [{rec['low']:.2f}, {rec['high']:.2f}] "
            f"({rec['seeds']} seeds, {rec['commit']})")


def amendments_markdown(rows: Sequence[tuple[int, Headline]], log: Mapping[str, Any] | None = None, *,
                        entries: bool = True) -> str:
    """The amendments of the headline ``rows`` (``(row number, headline)``) as a markdown list: id,
    date, commits, what, why, the verdict before and after; empty when none is amended. With
    ``entries`` (REPORT.md), a line per amendment of whole entries that no headline row holds (A12)."""
    lines = []
    log = load_log() if log is None else log
    for n, h in rows:
        for a in row_amendments(h, log):
            late = (" Decided after the earlier result was seen." if a.get("after_seeing")
                    and "decided after" not in a["why"].lower() else "")
            lines.append(f"- **{a['id']}** (row {n}, {h.entry}, {a['date']}, {', '.join(a['commits'])}): "
                         f"{a['what']} Why: {a['why']}{late} Before: {_side(a['before'])}; after: "
                         f"{_side(a['after'])}.")
    for a in log.get("entry_amendment", []) if entries else []:
        moved = [e for e in a["entries"] if e["verdict_before"] != e["verdict_after"]]
        claims = sum(len(e.get("changed_claims", [])) for e in a["entries"])
        lines.append(f"- **{a['id']}** ({len(a['entries'])} entries, no headline row, {a['date']}, "
                     f"{', '.join(a['commits'])}): {a['what']} Why: {a['why']} {claims} stored claim verdicts and "
                     f"{len(moved)} entry verdicts changed; each, before and after, is in the log.")
    if lines and log.get("not_yet_logged"):
        lines.append(f"- *Not yet logged:* {log['not_yet_logged']}")
    return "\n".join(lines)


def _via(entry: str, stored: str, declared: str, log: Mapping[str, Any]) -> list[str]:
    """The ids of the logged amendments that lead from ``stored`` to ``declared`` (as :func:`unrecorded`
    follows them); empty when none does."""
    edges: dict[str, tuple[str, str]] = {}
    for a in amendments(log):
        if a.get("entry") == entry and a.get("from_hash") and a.get("to_hash"):
            edges[a["from_hash"]] = (a["to_hash"], a["id"])
    for a in log.get("entry_amendment", []):
        for e in a.get("entries", []):
            if e.get("entry") == entry:
                edges[e["from_hash"]] = (e["to_hash"], a["id"])
    ids, h = [], stored
    while h != declared and h in edges and len(ids) <= len(edges):
        h, name = edges[h]
        ids.append(name)
    return ids if h == declared else []


def protocol_cell(headline: Headline, result: Any = None, log: Mapping[str, Any] | None = None) -> str:
    """A headline row's protocol as the table shows it: the hash its stored result ran under (or
    the declaration's, marked, when the result stores none), whether the declaration still has it,
    and its amendments' ids."""
    try:
        declared = protocol_hash(headline.entry)
    except KeyError:  # a headline of an unregistered entry, or one without a threshold source
        return "not declared"
    stored = getattr(result, "protocol_hash", "") or ""
    via = _via(headline.entry, stored, declared, load_log() if log is None else log)
    text = f"`{stored}`" if stored == declared else (
        f"`{stored}` (declared now: `{declared}`{', via ' + ', '.join(via) if via else ''})" if stored
        else f"declared `{declared}`, not stored")
    ids = [a["id"] for a in row_amendments(headline, log)]
    return text + (f"; amended {len(ids)}x: {', '.join(ids)}" if ids else "; no amendment logged")


def paper_protocols_markdown(paper: str, results: Mapping[str, Any], link: Any = None,
                             log: Mapping[str, Any] | None = None) -> str:
    """A paper page's section on its headline rows (``paper``: the id prefix, ``"fedtan"``): each row's
    protocol (:func:`protocol_cell`) and the amendments beside it; empty when the paper has no row."""
    rows = [(n, h) for n, h in enumerate(HEADLINES, 1) if h.paper == paper]
    if not rows:
        return ""
    show = link or (lambda eid: f"`{eid}`")
    lines = ["## Headline rows: protocol and amendments", "",
             "Each headline row's protocol is declared in `bnfl.experiments.protocols` and hashed; the hash below "
             "is the one its stored result ran under. Amendments, with the verdict before and after, are "
             "recorded in `figures/PROTOCOL-LOG.json` (see *Pre-registered protocols*).", ""]
    lines += [f"- Row {n}, {show(h.entry)} `{h.claim}` ({h.topic}): {protocol_cell(h, results.get(h.entry), log)}."
              for n, h in rows]
    amended = amendments_markdown(rows, log, entries=False)
    return "\n".join(lines + (["", "Amendments:", "", amended] if amended else [])) + "\n"
