"""What changed between two versions of a grammar contract, at the level of its language.

A grammar's text can change without its language changing (a rule renamed, an alternative
reordered), and a one-character edit to a regex can take away half of it. So the diff compares
languages, in two steps:

1. syntactically, the terminals and rule alternatives each version has and the other lacks
   (Lark's compiled form, names of Lark's own helper rules left out);
2. by sentences, which decide: sentences drawn from the old grammar *through* each removed
   alternative or terminal are recognized by the new one (a removal that the rest of the
   grammar still covers is not a narrowing), and the same for additions the other way round;
   then sentences drawn from each version at large are recognized by the other, for the
   changes a syntactic view cannot see (a regex edited in place). These are the fuzzer's
   sentences (`sdk.grammar._sentences`), drawn with a fixed seed, so a diff can be repeated.

A sentence of the old grammar that the new one rejects is `grammar-narrowed` (breaking for the
model and for stored texts), one of the new grammar that the old one rejects is
`grammar-widened` (compatible), and a changed text whose sentences tell nothing apart is
`grammar-rewritten`. Sampling can miss a narrowing that no drawn sentence reaches; a syntactic
removal that no sentence shows is therefore reported as a rewrite only after its own sentences
were tried.
"""

from __future__ import annotations

from collections.abc import Iterable

from sdk.grammar import Grammar
from sdk.grammar import recognize
from sdk.grammar._compiled import CompiledGrammar
from sdk.grammar._compiled import GrammarRule
from sdk.grammar._compiled import compile_grammar
from sdk.grammar._sentences import Sampler
from sdk.schema.canonical import SchemaInfo
from sdk.workflow.diff import Change
from sdk.workflow.diff import ChangeKind
from sdk.workflow.diff import SchemaDiff

__all__ = ["diff_grammars"]

SENTENCES = 200
"""Sentences drawn from each whole grammar (and a few through each changed alternative)."""
SHOWN_CHANGES = 8
"""Changes of one kind listed one by one; the rest are counted in one more line."""
_PER_ALTERNATIVE = 6
_SEED = 22
_SHOWN = 80


def diff_grammars(old: Grammar | None, new: Grammar) -> SchemaDiff:
    """Compare two versions of a grammar (`old` None: a grammar not locked yet)."""
    if old is None:
        empty = SchemaInfo(name=new.name, version=0, fingerprint="")
        change = Change(ChangeKind.GRAMMAR_WIDENED, "", "a new grammar: every sentence is new")
        return SchemaDiff(old=empty, new=new.info(), changes=[change])
    diff = SchemaDiff(old=old.info(), new=new.info())
    if old.fingerprint() == new.fingerprint():
        return diff
    old_c, new_c = compile_grammar(old.lark), compile_grammar(new.lark)
    old_s, new_s = Sampler(old_c), Sampler(new_c)
    old_keys, new_keys = _alternatives(old_c), _alternatives(new_c)
    removed, added = old_keys - new_keys, new_keys - old_keys
    changes: list[Change] = []
    changes += _witnesses(ChangeKind.GRAMMAR_NARROWED, old_s, new, _through(old_c, removed))
    changes += _witnesses(ChangeKind.GRAMMAR_WIDENED, new_s, old, _through(new_c, added))
    kinds = {change.kind for change in changes}
    if ChangeKind.GRAMMAR_NARROWED not in kinds:
        changes += _witnesses(ChangeKind.GRAMMAR_NARROWED, old_s, new, [("", None)])
    if ChangeKind.GRAMMAR_WIDENED not in kinds:
        changes += _witnesses(ChangeKind.GRAMMAR_WIDENED, new_s, old, [("", None)])
    if not changes:
        detail = f"the text changed; {SENTENCES} sentences drawn from each version parse under both"
        changes.append(Change(ChangeKind.GRAMMAR_REWRITTEN, "", detail))
    return SchemaDiff(old=diff.old, new=diff.new, changes=changes)


_Key = tuple[str, tuple[str, ...]]


def _alternatives(grammar: CompiledGrammar) -> set[_Key]:
    """Each rule alternative as (rule, symbols), terminals by how they are written, so that the
    names Lark gives anonymous terminals do not count as changes."""
    return {_key(grammar, rule) for rule in grammar.rules}


def _key(grammar: CompiledGrammar, rule: GrammarRule) -> _Key:
    symbols = tuple(
        grammar.terminals[s.name].shown if s.is_term else s.name for s in rule.expansion
    )
    return rule.origin, symbols


def _through(grammar: CompiledGrammar, keys: set[_Key]) -> list[tuple[str, GrammarRule | None]]:
    """The alternatives of `grammar` with those keys, with where each is (for the pointer);
    Lark's own helper rules (`__name_star_0`) are reached through the rules that use them."""
    return [
        (f"/rules/{rule.origin}", rule)
        for rule in grammar.rules
        if _key(grammar, rule) in keys and not rule.origin.startswith("__")
    ]


def _witnesses(
    kind: ChangeKind,
    sampler: Sampler,
    other: Grammar,
    targets: Iterable[tuple[str, GrammarRule | None]],
) -> list[Change]:
    """One change per target whose sentences include one `other` rejects, up to
    `SHOWN_CHANGES` of them (one witness is enough to classify; the rest go unchecked)."""
    found: list[Change] = []
    verb = "is no longer a sentence" if kind is ChangeKind.GRAMMAR_NARROWED else "is new"
    targets = list(targets)
    for done, (pointer, rule) in enumerate(targets):
        if len(found) == SHOWN_CHANGES:
            rest = len(targets) - done
            found.append(Change(kind, "", f"and {rest} more changed alternatives, not checked"))
            break
        count = SENTENCES if rule is None else _PER_ALTERNATIVE
        drawn = sampler.sentences(count, seed=_SEED, through=rule)
        witnesses = [s for s in drawn if recognize(other, s) is not None]
        if witnesses:
            shortest = min(witnesses, key=len)
            where = f" (through {_describe(sampler.grammar, rule)})" if rule else ""
            found.append(Change(kind, pointer, f"{_short(shortest)} {verb}{where}"))
    return found


def _describe(grammar: CompiledGrammar, rule: GrammarRule) -> str:
    origin, symbols = _key(grammar, rule)
    return f"{origin}: {' '.join(symbols) or '(empty)'}"


def _short(sentence: str) -> str:
    shown = repr(sentence)
    return shown if len(shown) <= _SHOWN else shown[: _SHOWN - 4] + "...'"
