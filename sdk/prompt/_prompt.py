"""`Prompt`: a prompt template with typed inputs, a name and a version, locked like a contract.

    class Triage(Prompt):
        version = 1
        system = "You triage support tickets for {{ product }}."
        template = '''
            Classify this ticket.

            <ticket>
            {{ ticket }}
            </ticket>
            '''

        class Inputs(BaseModel):
            product: str
            ticket: str

    client.generate(Decision, prompt=Triage(product="Initech", ticket=text))
    Triage(product="Initech", ticket=text).render()      # the system prompt and messages
    Triage.render(product="Initech", ticket=text)        # the same, in one step

A subclass is one prompt: `name` (the class's name unless set), `version` (an integer from 1,
bumped on every change, like `Contract.schema_version`), `template` (the user turn, Jinja2),
`system` (optional, Jinja2) and `Inputs` (a Pydantic model of the variables; leave it out for a
template without variables). Everything is checked when the class is defined: the templates
compile, every name they read is an input (or `contract`), every input is read.

An instance is the prompt with its variables, validated then and there: a missing variable or
a wrong type is a pydantic `ValidationError` (strict: no coercion), an unknown one a
`TypeError`, before anything is sent. Rendering happens in Jinja2's sandbox
(`sdk.prompt._template`): a value is never run as template code.

The fingerprint (sha256 of name, version, both templates and the inputs' JSON Schema) is what
`sdk schema lock` pins beside the contracts, what `check` compares, and what every `Result`,
batch line and eval row names (`PromptInfo`). A template that reads `contract` is rendered for
the call's output (its schema, its compact type definition, its fields' descriptions).

An `Image` or `PDF` input is a part of the user turn where the template writes it
(`{{ photo }}`), text before and after it as text parts.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import secrets
import weakref
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar

from pydantic import BaseModel
from pydantic import ConfigDict

from sdk._message import Message
from sdk._values.blank import blank
from sdk._values.content import PDF
from sdk._values.content import Image
from sdk._values.content import Part
from sdk._values.content import Text
from sdk._values.declared import did_you_mean
from sdk._values.records import PromptInfo
from sdk.prompt._template import TemplateError
from sdk.prompt._template import compile_template
from sdk.prompt._template import literal_prefix
from sdk.prompt._template import render
from sdk.prompt._template import variables_of
from sdk.prompt._view import ContractView
from sdk.prompt._view import view_of
from sdk.schema.canonical import without_module_paths

if TYPE_CHECKING:
    from jinja2 import Template

__all__ = ["Prompt", "RenderedPrompt", "prompt_fingerprint"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Names a template reads that are not inputs: the call's output.
_RESERVED = frozenset({"contract"})


class _NoInputs(BaseModel):
    """The inputs of a template without variables."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class RenderedPrompt:
    """A prompt rendered: the system prompt (or `None`), the user turn, and which prompt. It
    reads as its messages (`rendered[0]`, `len(rendered)`, `for message in rendered`), but is
    not a conversation by itself (a call given it as `messages=` would lose the system prompt):
    a call takes the `Prompt`, or `.messages` and `.system` apart."""

    system: str | None
    messages: tuple[Message, ...]
    info: PromptInfo
    system_static: bool = False
    """Whether the system prompt is the same on every call (its template reads no variable)."""

    @property
    def text(self) -> str:
        """The user turn's text (images and documents left out)."""
        return "\n\n".join(message.text for message in self.messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def __getitem__(self, index: int) -> Message:
        return self.messages[index]


class _Render:
    """`render` on the class (variables in, `MyPrompt.render(ticket=...)`) and on an instance
    (`MyPrompt(ticket=...).render()`): one method, both ways."""

    def __get__(
        self, instance: Prompt | None, owner: type[Prompt]
    ) -> Callable[..., RenderedPrompt]:
        if instance is None:

            def render_class(*, contract: Any = None, **variables: Any) -> RenderedPrompt:
                return owner(**variables).render(contract=contract)

            render_class.__doc__ = Prompt._render.__doc__
            return render_class

        def render_instance(*, contract: Any = None) -> RenderedPrompt:
            return instance._render(contract)

        render_instance.__doc__ = Prompt._render.__doc__
        return render_instance


class Prompt:
    """A prompt template with typed inputs, a name and a version (see the module docstring)."""

    name: ClassVar[str] = "Prompt"
    """The prompt's name (the class's own name unless set): lock entries and results use it."""
    version: ClassVar[int] = 1
    """Bumped on every change of a template or the inputs (`sdk schema check` says when)."""
    system: ClassVar[str | None] = None
    """The system prompt's template, if the prompt has one."""
    template: ClassVar[str]
    """The user turn's template."""
    Inputs: ClassVar[type[BaseModel]] = _NoInputs
    """The variables, as a Pydantic model (none by default)."""

    _info: ClassVar[PromptInfo]

    __slots__ = ("inputs",)
    inputs: BaseModel

    render = _Render()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__
        if getattr(cls, "template", None) is None:
            return  # an abstract base (a shared system prompt, say): not a prompt of its own
        _define(cls)

    def __init__(self, inputs: BaseModel | None = None, /, **variables: Any) -> None:
        cls = type(self)
        if not hasattr(cls, "_info"):
            raise TypeError(f"{cls.__name__} has no template: it is a base for prompts")
        if inputs is not None:
            if variables:
                raise TypeError(f"{cls.__name__}() takes an Inputs instance or variables, not both")
            if not isinstance(inputs, cls.Inputs):
                raise TypeError(
                    f"{cls.__name__}() takes a {cls.Inputs.__name__}, not {type(inputs).__name__}"
                )
            self.inputs = inputs
            return
        fields = cls.Inputs.model_fields
        for name in variables:
            if name not in fields:
                hint = did_you_mean(name, list(fields))
                takes = ", ".join(fields) or "none"
                raise TypeError(
                    f"{cls.__name__}() got an unexpected variable {name!r}{hint}; it takes: {takes}"
                )
        self.inputs = cls.Inputs.model_validate(variables, strict=True)

    @classmethod
    def from_json(cls, variables: Mapping[str, Any]) -> Prompt:
        """The prompt with variables read from JSON (a batch line, an eval item): strict JSON
        validation, so a date may be a string but a number is never a string."""
        if not isinstance(variables, Mapping):
            raise TypeError(f"{cls.name}'s variables are a JSON object, not {variables!r}")
        unknown = sorted(set(variables) - set(cls.Inputs.model_fields))
        if unknown:
            raise TypeError(f"{cls.name} got unexpected variables: {', '.join(unknown)}")
        return cls(cls.Inputs.model_validate_json(json.dumps(variables), strict=True))

    @classmethod
    def info(cls) -> PromptInfo:
        """Name, version and fingerprint: what results and the lock file carry."""
        return cls._info

    @classmethod
    def fingerprint(cls) -> str:
        """sha256 hex of the prompt's content: name, version, templates, inputs' schema."""
        return cls._info.fingerprint

    @classmethod
    def reads_contract(cls) -> bool:
        """Whether a template reads `contract` (rendered from the call's output)."""
        return any("contract" in variables_of(t) for t in _sources(cls))

    @classmethod
    def snapshot(cls) -> dict[str, Any]:
        """What the lock's snapshot file holds: the content the fingerprint is made of."""
        return _content(cls)

    def _render(self, contract: Any = None) -> RenderedPrompt:
        """The system prompt and the user turn, rendered in the sandbox with the variables
        (and `contract`: the output it is rendered for, a contract class or a `Grammar`)."""
        cls = type(self)
        view = view_of(contract) if contract is not None else None
        marker = f"\x00sdk-part-{secrets.token_hex(16)}-"
        values, parts = _values(self.inputs, marker)
        system_template, user_template = _compiled(cls)
        system = None
        if system_template is not None:
            text = render(system_template, _with(values, view, cls), f"{cls.name}.system")
            if marker in text:
                raise TemplateError(
                    f"{cls.name}.system: images and documents go in the user template",
                    template=f"{cls.name}.system",
                )
            # A system prompt rendered to nothing a reader sees (`{% if persona %}...` without
            # one, a blank variable) is none, as `system=""` is: never sent as blank text.
            system = None if blank(text) else text
        text = render(user_template, _with(values, view, cls), f"{cls.name}.template")
        content = _split(text, marker, parts)
        if all(isinstance(p, Text) and blank(p.text) for p in content):
            raise ValueError(f"{cls.name} rendered to an empty prompt")
        static = _common_prefix(literal_prefix(cls.template), text.split(marker, 1)[0])
        message = Message("user", text if len(content) == 1 and not parts else content,
                          static_prefix=len(static))  # fmt: skip
        static_system = system is not None and not (variables_of(cls.system or "") - _RESERVED)
        return RenderedPrompt(system, (message,), cls._info, static_system)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={_short(v)}" for k, v in self.inputs.model_dump().items())
        return f"{type(self).__name__}({shown})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Prompt) and type(other) is type(self) and other.inputs == self.inputs
        )

    def __hash__(self) -> int:
        return hash((type(self), self.inputs.model_dump_json()))


def prompt_fingerprint(content: Mapping[str, Any]) -> str:
    """The fingerprint of a prompt's content (also computed from a snapshot read back)."""
    data = json.dumps(content, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


def _define(cls: type[Prompt]) -> None:
    """Check a prompt class where it is defined, compile its templates, fingerprint it."""
    if not isinstance(cls.name, str) or not _NAME.match(cls.name):
        raise ValueError(
            f"a prompt name is a Python-style identifier (it names snapshot files), not "
            f"{cls.name!r}"
        )
    version = cls.version
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{cls.name}.version is an integer >= 1, not {version!r}")
    if not (isinstance(cls.Inputs, type) and issubclass(cls.Inputs, BaseModel)):
        raise TypeError(f"{cls.name}.Inputs must be a pydantic BaseModel class")
    if not isinstance(cls.template, str) or blank(cls.template):
        raise ValueError(f"{cls.name}.template is empty: say what the model should do")
    if cls.system is not None and (not isinstance(cls.system, str) or blank(cls.system)):
        raise ValueError(f"{cls.name}.system is empty: leave it out, or write the system prompt")
    cls.template = inspect.cleandoc(cls.template)
    if cls.system is not None:
        cls.system = inspect.cleandoc(cls.system)
    fields = set(cls.Inputs.model_fields)
    clash = sorted(fields & _RESERVED)
    if clash:
        raise TypeError(f"{cls.name}.Inputs may not have a field named {clash[0]!r} (reserved)")
    _compiled(cls)  # a template that does not compile is refused where the prompt is defined
    read = frozenset().union(*(variables_of(t) for t in _sources(cls))) - _RESERVED
    unknown, unread = sorted(read - fields), sorted(fields - read)
    if unknown:
        raise TypeError(
            f"{cls.name}'s templates read {', '.join(unknown)}, which {cls.name}.Inputs does not "
            "declare"
        )
    if unread:
        raise TypeError(f"{cls.name}.Inputs declares {', '.join(unread)}, which no template reads")
    cls._info = PromptInfo(cls.name, version, prompt_fingerprint(_content(cls)))


_COMPILED: weakref.WeakKeyDictionary[type[Prompt], tuple[Template | None, Template]] = (
    weakref.WeakKeyDictionary()
)


def _compiled(cls: type[Prompt]) -> tuple[Template | None, Template]:
    """A prompt's compiled templates (system, user), kept beside its class and not on it: a
    class sent to another process by value (cloudpickle, as Ray sends a prompt defined in a
    notebook or a script's `__main__` to its actors) carries its sources, which compile there
    on first use (a compiled Jinja2 template does not unpickle)."""
    compiled = _COMPILED.get(cls)
    if compiled is None:
        system = compile_template(cls.system, f"{cls.name}.system") if cls.system else None
        compiled = (system, compile_template(cls.template, f"{cls.name}.template"))
        _COMPILED[cls] = compiled
    return compiled


def _sources(cls: type[Prompt]) -> list[str]:
    return [source for source in (cls.system, cls.template) if source]


def _content(cls: type[Prompt]) -> dict[str, Any]:
    return {
        "name": cls.name,
        "version": cls.version,
        "system": cls.system,
        "template": cls.template,
        "inputs": _inputs_schema(cls.Inputs),
    }


def _inputs_schema(inputs: type[BaseModel]) -> dict[str, Any]:
    """The inputs' JSON Schema as the fingerprint takes it: with the `$defs` keys Pydantic
    qualifies with a module path (two nested classes of one name) renamed as a contract's are
    (`sdk.schema.canonical.without_module_paths`), so moving a module keeps the fingerprint."""
    schema = inputs.model_json_schema()
    without_module_paths(schema)
    return schema


def _values(inputs: BaseModel, marker: str) -> tuple[dict[str, Any], list[Part]]:
    """The variables for the template, each `Image`/`PDF` (alone or in a list) replaced by a
    marker no value can forge (a fresh random token per rendering)."""
    parts: list[Part] = []

    def placed(value: Any) -> Any:
        if isinstance(value, (Image, PDF)):
            parts.append(value)
            return f"{marker}{len(parts) - 1}\x00"
        if isinstance(value, (list, tuple)) and any(isinstance(v, (Image, PDF)) for v in value):
            return [placed(v) for v in value]
        return value

    return {name: placed(getattr(inputs, name)) for name in type(inputs).model_fields}, parts


def _with(values: dict[str, Any], view: ContractView | None, cls: type[Prompt]) -> dict[str, Any]:
    if view is None and cls.reads_contract():
        raise TemplateError(
            f"{cls.name} reads `contract`: render it for one (render(contract=MyContract)), or "
            "pass it to a call that asks for a contract or a grammar",
            template=f"{cls.name}.template",
        )
    return {**values, "contract": view} if view is not None else values


def _split(text: str, marker: str, parts: list[Part]) -> tuple[Part, ...]:
    """The rendered text cut at each part's marker, the parts put in their places."""
    if not parts:
        return (Text(text),)
    pieces = re.split(re.escape(marker) + r"([0-9]+)\x00", text)
    out: list[Part] = []
    for index, piece in enumerate(pieces):
        if index % 2 == 0:
            if piece.strip():
                out.append(Text(piece))
        else:
            out.append(parts[int(piece)])
    return tuple(out)


def _common_prefix(a: str, b: str) -> str:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return a[:length]


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."
