"""Jinja2 templates in a sandbox: compiled once, rendered with values that are never code.

Jinja2 is imported on first use (`import sdk` does not pay for it). The environment is
`ImmutableSandboxedEnvironment`:

- a variable's value is data: `{{ ticket }}` writes the text of `ticket`, and a `{{ ... }}` or
  `{% ... %}` inside that text is written as it is, never parsed (Jinja renders a template's
  source once; values are never templates);
- attribute access is restricted: `__class__`, `__globals__`, `mro()`, a function's code and
  every underscore attribute raise `SecurityError`, and lists and dicts cannot be changed from a
  template; `range` is capped;
- an undefined name is an error (`StrictUndefined`), not an empty string, so a misspelled
  variable fails instead of vanishing from the prompt;
- there is no loader: a template with `{% include %}`, `{% import %}` or `{% extends %}` is
  refused where its prompt is defined (a prompt is one template, all of it fingerprinted).

Whitespace: `trim_blocks` and `lstrip_blocks`, so a `{% if %}` line leaves no blank line.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from jinja2 import Template
    from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["TemplateError", "compile_template", "literal_prefix", "render", "variables_of"]


class TemplateError(ValueError):
    """A prompt template that cannot be compiled or rendered: a syntax error, an undefined
    name, or an attribute the sandbox refuses (`.template` says which template)."""

    def __init__(self, message: str, *, template: str) -> None:
        super().__init__(message)
        self.template = template
        """Which template: `"Triage.system"` or `"Triage.template"`."""


@functools.cache
def environment() -> ImmutableSandboxedEnvironment:
    """The one sandboxed environment every prompt renders in."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        loader=None,
    )


def compile_template(source: str, where: str) -> Template:
    """The compiled template (`TemplateError` naming `where` and the line for bad syntax)."""
    import jinja2
    from jinja2 import nodes

    env = environment()
    try:
        tree = env.parse(source)
    except jinja2.TemplateSyntaxError as error:
        raise TemplateError(
            f"{where}: line {error.lineno}: {error.message}", template=where
        ) from None
    for node in tree.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        tag = {"Include": "include", "Import": "import", "FromImport": "from ... import",
               "Extends": "extends"}[type(node).__name__]  # fmt: skip
        raise TemplateError(
            f"{where}: line {node.lineno}: {{% {tag} %}} is not allowed: a prompt is one "
            "template (its whole text is what the fingerprint and the lock pin)",
            template=where,
        )
    return env.from_string(tree)


def variables_of(source: str) -> frozenset[str]:
    """The names a template reads from its context (the loop variables it binds aside)."""
    from jinja2 import meta

    return frozenset(meta.find_undeclared_variables(environment().parse(source)))


def literal_prefix(source: str) -> str:
    """The text before the template's first tag, expression or comment: the same whatever
    the values (what a prompt cache can hold)."""
    env = environment()
    starts = [
        index
        for marker in (env.variable_start_string, env.block_start_string, env.comment_start_string)
        if (index := source.find(marker)) >= 0
    ]
    return source[: min(starts)] if starts else source


def render(template: Template, values: Mapping[str, Any], where: str) -> str:
    """The template rendered with `values` (`TemplateError` for an undefined name, a refused
    attribute, a nesting too deep, or any other failure inside the template)."""
    import jinja2
    from jinja2.exceptions import SecurityError

    try:
        return template.render(**values)
    except SecurityError as error:
        raise TemplateError(f"{where}: refused by the sandbox: {error}", template=where) from None
    except jinja2.UndefinedError as error:
        raise TemplateError(f"{where}: {error}", template=where) from None
    except jinja2.TemplateError as error:
        raise TemplateError(f"{where}: {error}", template=where) from None
    except RecursionError:
        raise TemplateError(f"{where}: nested too deeply", template=where) from None
    except Exception as error:  # a sandbox limit (`range` too big), a filter's own failure
        raise TemplateError(f"{where}: {type(error).__name__}: {error}", template=where) from None
