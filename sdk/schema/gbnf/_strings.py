"""Strings: length bounds, `pattern` (the regex subset of `sdk.schema._regex`), `format`."""

from __future__ import annotations

import re
from typing import Any

from sdk.schema import _regex as rx
from sdk.schema.gbnf._gbnf_text import char_class
from sdk.schema.gbnf._gbnf_text import is_atom
from sdk.schema.gbnf._gbnf_text import join_terms
from sdk.schema.gbnf._gbnf_text import literal
from sdk.schema.gbnf._json_values import JSON_SPECIAL
from sdk.schema.gbnf._json_values import SHORT_ESCAPES
from sdk.schema.gbnf._keywords import FORMATS
from sdk.schema.gbnf._keywords import NOT_IN
from sdk.schema.gbnf._keywords import SPEC_FORMATS
from sdk.schema.gbnf._lengths import fit
from sdk.schema.gbnf._walker import SchemaWalker

# One character of a JSON string in its canonical spelling: raw, or the one escape JSON needs
# (`\"`, `\\`, the short escapes, `\u00XX` in lower case for the other control characters).
_CANONICAL_ESCAPE = r'"\\" ( ["\\bfnrt] | "u00" ( "0" [0-7bef] | "1" [0-9a-f] ) )'


class StringRules(SchemaWalker):
    """Rules for string nodes."""

    keys_except: dict[tuple[str, ...], str]  # names -> the rule of the strings that are none

    def string(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        excluded = node.get(NOT_IN)
        if excluded is not None:
            # Written by `exclude` (any string but these): alone or not at all.
            if set(node) & {"pattern", "format", "minLength", "maxLength"}:
                return self.problem(pointer, "not", "a string outside a set, with other bounds")
            key = self.key_except(list(excluded), hint)
            return key if key is not None else self.problem(pointer, "not", "a string set")
        min_len = self.count(node, "minLength", pointer)
        max_len = self.limit(node, "maxLength", pointer)
        pattern, fmt = node.get("pattern"), node.get("format")
        if isinstance(fmt, str) and fmt not in SPEC_FORMATS:
            fmt = None  # not a format JSON Schema defines: an annotation, ignored by validators
        regex: str | None = None
        regex_keyword = "pattern"
        if fmt is not None:
            if pattern is not None:
                return self.problem(pointer, "format", "`format` beside `pattern`")
            if fmt not in FORMATS:
                known = ", ".join(FORMATS)
                return self.problem(pointer, "format", f"format {fmt!r} (supported: {known})")
            regex, regex_keyword = FORMATS[fmt], "format"
        elif pattern is not None:
            if not isinstance(pattern, str):
                return self.problem(pointer, "pattern", "`pattern` must be a string")
            regex = pattern
        if regex is not None:
            return self.pattern(regex, regex_keyword, min_len, max_len, pointer, hint)
        if max_len is not None and max_len < min_len:
            return self.problem(pointer, "maxLength", "maxLength below minLength: no value")
        quote = literal('"')
        if (min_len, max_len) == (0, None):
            return self.shared("string")
        chars = self.repeat(self.shared("char"), min_len, max_len, f"{hint}-chars")
        return self.define(hint, join_terms(quote, chars, quote))

    def pattern(
        self,
        regex: str,
        keyword: str,
        min_len: int,
        max_len: int | None,
        pointer: str,
        hint: str,
    ) -> str:
        try:
            branches = rx.parse_pattern(regex)
            if min_len or max_len is not None:
                branches = self.within_lengths(branches, min_len, max_len)
            bodies = [self.branch(branch, hint) for branch in branches]
        except rx.RegexUnsupported as error:
            return self.problem(pointer, keyword, f"pattern not expressible: {error}")
        if not bodies:
            which = "minLength" if min_len else "maxLength"
            return self.problem(
                pointer, which, f"no string matches the {keyword} within the length bounds"
            )
        quote = literal('"')
        return self.alternatives([join_terms(quote, body, quote) for body in bodies], hint)

    def within_lengths(
        self, branches: list[rx.Branch], min_len: int, max_len: int | None
    ) -> list[rx.Branch]:
        """The branches, each narrowed to the length bounds where they do not imply them."""
        out = []
        for branch in branches:
            low, high = rx.length_range(branch.node)
            if not (branch.anchored_start and branch.anchored_end):
                high = None
            if min_len <= low and (max_len is None or (high is not None and high <= max_len)):
                out.append(branch)
                continue
            fitted = fit(branch, min_len, max_len)
            if fitted is not None:
                out.append(rx.Branch(fitted, anchored_start=True, anchored_end=True))
        return out

    def branch(self, branch: rx.Branch, hint: str) -> str:
        """One top-level regex alternative inside a JSON string; unanchored ends take any
        characters (JSON Schema patterns search, they do not match the whole string)."""
        free = f"{self.shared('char')}*"
        return join_terms(
            "" if branch.anchored_start else free,
            self.regex(branch.node, f"{hint}-pattern"),
            "" if branch.anchored_end else free,
        )

    def regex(self, node: rx.Node, hint: str) -> str:
        """A term for the JSON-encoded text of the strings `node` matches (may be empty)."""
        if isinstance(node, rx.CharSet):
            return self.json_chars(node.ranges, hint)
        if isinstance(node, rx.Seq):
            return join_terms(*(self.regex(item, hint) for item in node.items))
        if isinstance(node, rx.Alt):
            options = [self.regex(option, hint) for option in node.options]
            present = list(dict.fromkeys(o for o in options if o))
            if not present:
                return ""
            group = present[0] if len(present) == 1 else "( " + " | ".join(present) + " )"
            if len(present) < len(options):  # an empty option: the whole group is optional
                return f"{self.atom(group, hint)}?"
            return group
        inner = self.regex(node.node, hint)
        if not inner:
            return ""
        if node.hi is None and rx.length_range(node.node)[0] == 0:
            # x* with x able to match "" is left recursion for llama.cpp.
            raise rx.RegexUnsupported("unbounded repetition of something that can match ''")
        return self.repeat(inner, node.lo, node.hi, hint)

    def json_chars(self, ranges: rx.Ranges, hint: str) -> str:
        """One JSON string character whose decoded value is in `ranges`, canonically written:
        raw when JSON allows it, else the escape (`\\"`, `\\\\`, `\\n` or `\\u000a`, ...)."""
        raw = rx.subtract(ranges, JSON_SPECIAL)
        parts = [char_class(raw)] if raw else []
        inside = set()
        for lo, hi in ranges:
            for point in range(lo, min(hi, 0x5C) + 1):
                inside.add(point)
        if 0x22 in inside:
            parts.append(literal('\\"'))
        if 0x5C in inside:
            parts.append(literal("\\\\"))
        controls = sorted(p for p in inside if p < 0x20)
        if len(controls) == 0x20:
            hex_rule = self.shared("hex")
            parts.append(f'"\\\\" ( [bfnrt] | "u00" [01] {hex_rule} )')
        else:
            for point in controls:
                spelled = [literal("\\u00" + f"{point:02x}"[0])]
                low = f"{point:02x}"[1]
                spelled.append(literal(low) if low.isdigit() else f"[{low}{low.upper()}]")
                forms = [" ".join(spelled)]
                if point in SHORT_ESCAPES:
                    forms.insert(0, literal("\\" + SHORT_ESCAPES[point]))
                parts.append(forms[0] if len(forms) == 1 else "( " + " | ".join(forms) + " )")
        if len(parts) == 1 and len(raw) == 1 and raw[0][0] == raw[0][1]:
            return literal(chr(raw[0][0]))  # one plain character: `"-"` reads better than `[\x2D]`
        if len(parts) == 1 and is_atom(parts[0]):
            return parts[0]
        return self.define(f"{hint}-char", " | ".join(parts))

    def key_except(self, names: list[str], hint: str) -> str | None:
        """A JSON string, canonically spelled, that is none of `names` (None when a name has a
        character JSON escapes: such objects keep to their declared members, a narrowing)."""
        special = re.compile(r'["\\\x00-\x1f]')
        if any(special.search(name) for name in names):
            return None
        known = self.keys_except.get(tuple(names))
        if known is not None:
            return known
        trie: dict[str, Any] = {}
        for name in names:
            level = trie
            for char in name:
                level = level.setdefault(char, {})
            level[""] = {}  # the end of a name
        escape = self.define("canonical-escape", _CANONICAL_ESCAPE)
        plain = char_class(rx.complement(JSON_SPECIAL))
        rest = self.define("key-char", f"{plain} | {escape}")

        def state(level: dict[str, Any]) -> str:
            options = [
                join_terms(literal(char), state(level[char])) for char in level if char != ""
            ]
            taken = tuple(sorted((ord(c), ord(c)) for c in level if c != ""))
            others = rx.complement(rx.union(JSON_SPECIAL, rx.normalize(taken)))
            if others:
                options.append(f"{char_class(others)} {rest}*")
            options.append(f"{escape} {rest}*")
            body = " | ".join(options)
            if "" in level:  # a name ends here: the key must go on
                return self.define(f"{hint}-key-part", body)
            return f"{self.define(f'{hint}-key-part', body)}?"

        key = self.define(f"{hint}-key", join_terms(literal('"'), state(trie), literal('"')))
        self.keys_except[tuple(names)] = key
        return key
