"""The rule book of one conversion: named rules (identical bodies shared), repetition within
llama.cpp's bounds, recorded problems, and the final grammar text."""

from __future__ import annotations

import re
from collections.abc import Sequence

from sdk.schema.canonical import escape_pointer
from sdk.schema.gbnf._errors import UnsupportedKeyword
from sdk.schema.gbnf._errors import UnsupportedSchema
from sdk.schema.gbnf._gbnf_text import is_atom
from sdk.schema.gbnf._gbnf_text import join_terms
from sdk.schema.gbnf._keywords import MAX_REPEAT
from sdk.schema.gbnf._keywords import Whitespace
from sdk.schema.gbnf._shared_rules import OPAQUE
from sdk.schema.gbnf._shared_rules import RESERVED
from sdk.schema.gbnf._shared_rules import SHARED_RULES


class RuleBook:
    """Rules and problems collected while walking one schema."""

    def __init__(self, whitespace: Whitespace) -> None:
        self.ws = "ws" if whitespace == "bounded" else ""
        self.rules: dict[str, str] = {}  # name -> body, in definition order
        self.by_body: dict[str, str] = {}  # body -> name, to share identical rules
        self.pending: set[str] = set()  # names reserved (for $ref targets, root) not yet defined
        self.problems: dict[tuple[str, str], UnsupportedKeyword] = {}
        self.counters: dict[str, int] = {}  # hint -> the last number `unique` gave it

    def render(self) -> str:
        """The grammar text: `root` first, then the rules in definition order, shared rules last.

        Raises `UnsupportedSchema` when any problem was recorded.
        """
        if self.problems:
            raise UnsupportedSchema(list(self.problems.values()))
        used = self.used_shared_rules()
        lines = [f"root ::= {self.rules['root']}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items() if name != "root"]
        # Shared rules last, in a fixed order: the output is deterministic.
        lines += [f"{name} ::= {self.shared_body(name)}" for name in SHARED_RULES if name in used]
        return "\n".join(lines) + "\n"

    def used_shared_rules(self) -> set[str]:
        """The shared rules the grammar refers to, directly or through other shared rules."""
        used: set[str] = set()
        bodies = list(self.rules.values())
        while bodies:
            for name in re.findall(r"[a-z][a-z0-9-]*", OPAQUE.sub(" ", bodies.pop())):
                if name in SHARED_RULES and name not in used:
                    used.add(name)
                    bodies.append(self.shared_body(name))
        return used

    def shared_body(self, name: str) -> str:
        body = SHARED_RULES[name]
        if not self.ws:
            # Compact mode: the shared rules lose their `ws` references (no literal in them
            # contains a space, so splitting on spaces is safe).
            body = " ".join(token for token in body.split(" ") if token != "ws")
        return body

    def problem(self, pointer: str, keyword: str, reason: str) -> str:
        """Record a problem; return a placeholder so that the walk goes on to find the rest."""
        where = f"{pointer}/{escape_pointer(keyword)}" if keyword else pointer
        self.problems.setdefault((where, keyword), UnsupportedKeyword(where, keyword, reason))
        return '"?"'

    # -- rules --

    def shared(self, name: str) -> str:
        """The name of a shared rule (emitted at the end if anything refers to it)."""
        assert name in SHARED_RULES, name
        return name

    def define(self, hint: str, body: str) -> str:
        """A rule with this body, named after `hint` (shared when an identical rule exists)."""
        if hint in self.pending:
            self.pending.discard(hint)
            self.rules[hint] = body
            return hint
        existing = self.by_body.get(body)
        if existing is not None:
            return existing
        name = self.unique(hint)
        self.rules[name] = body
        self.by_body[body] = name
        return name

    def unique(self, hint: str) -> str:
        # Numbering resumes where it stopped for this hint: thousands of rules named after one
        # hint (the states of a key grammar) cost linear time, not quadratic.
        counter = self.counters.get(hint, 1)
        name = hint if counter == 1 else f"{hint}-{counter}"
        while name in self.rules or name in self.pending or name in RESERVED:
            counter += 1
            name = f"{hint}-{counter}"
        self.counters[hint] = counter
        return name

    def atom(self, expr: str, hint: str) -> str:
        return expr if is_atom(expr) else self.define(hint, expr)

    def alternatives(self, exprs: Sequence[str], hint: str) -> str:
        unique = list(dict.fromkeys(exprs))
        if len(unique) == 1:
            return unique[0]
        if len(unique) <= 3 and all(re.fullmatch(r"[a-z][a-z0-9-]*", e) for e in unique):
            # A union of named rules reads best under its content: `string-or-null`.
            hint = "-or-".join(unique)
        return self.define(hint, " | ".join(unique))

    def repeat(self, expr: str, lo: int, hi: int | None, hint: str) -> str:
        """`expr` repeated lo..hi times, within llama.cpp's bound of 2000 per repetition."""
        if hi == 0:
            return ""
        unit = self.atom(expr, hint)
        if lo > MAX_REPEAT or (hi is not None and hi > MAX_REPEAT):
            # Exactly `lo` as whole blocks of MAX_REPEAT plus a remainder, then up to hi - lo
            # more (see `up_to`).
            blocks, rest = divmod(lo, MAX_REPEAT)
            block = self.define(f"{hint}-block", f"{unit}{{{MAX_REPEAT}}}")
            parts = [self.repeat(block, blocks, blocks, f"{hint}-blocks")]
            parts.append(self.repeat(unit, rest, rest, hint))
            parts.append(f"{unit}*" if hi is None else self.up_to(unit, block, hi - lo, hint))
            return join_terms(*parts)
        if (lo, hi) == (1, 1):
            return unit
        if (lo, hi) == (0, 1):
            return f"{unit}?"
        if hi is None:
            return f"{unit}*" if lo == 0 else f"{unit}+" if lo == 1 else f"{unit}{{{lo},}}"
        return f"{unit}{{{lo}}}" if lo == hi else f"{unit}{{{lo},{hi}}}"

    def up_to(self, unit: str, block: str, count: int, hint: str) -> str:
        """`unit` 0..count times for a large count: a full block and up to count - block more,
        or fewer than a block. Recursion depth count / 2000; the two options never overlap."""
        if count <= MAX_REPEAT:
            return self.repeat(unit, 0, count, hint)
        more = self.up_to(unit, block, count - MAX_REPEAT, hint)
        fewer = f"{unit}{{0,{MAX_REPEAT - 1}}}"
        return self.define(f"{hint}-up-to-{count}", f"{block} {more} | {fewer}")
