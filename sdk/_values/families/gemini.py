"""Google's Gemini API through `google-genai` (`sdk.providers.gemini`)."""

from __future__ import annotations

from sdk._values.dialect import CORE_KEYWORDS
from sdk._values.dialect import Dialect
from sdk._values.profile import Pricing
from sdk._values.profile import Profile
from sdk._values.profile import StopReason

__all__ = ["GEMINI", "GEMINI_DIALECT", "PROFILES"]

GEMINI_DIALECT = Dialect(
    name="gemini",
    # `response_json_schema`, as the google-genai client documents it: $id, $defs, $ref,
    # $anchor, type, format, title, description, enum, items, prefixItems, minItems, maxItems,
    # minimum, maximum, anyOf, oneOf (read as anyOf), properties, additionalProperties,
    # required. No `const`, `allOf`, exclusive bounds, multipleOf, string lengths or pattern.
    keywords=(CORE_KEYWORDS - {"const"})
    | {"$id", "$anchor", "format", "prefixItems", "minItems", "maxItems", "minimum", "maximum"},
    formats=frozenset({"date-time", "date", "time"}),
    one_of_as_any_of=True,
    ref_siblings="drop",
    hint_removed=True,
    doc="Gemini `response_json_schema`: numeric minimum/maximum and item counts kept; no "
    "const, allOf, exclusive bounds, multipleOf, minLength/maxLength or pattern; three "
    "string formats; a $ref takes no sibling keys.",
)

_FILTERS = (
    "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION",
)  # fmt: skip
_NOT_AN_END = (
    "MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS", "LANGUAGE", "OTHER",
    "FINISH_REASON_UNSPECIFIED", "MALFORMED_RESPONSE", "MISSING_THOUGHT_SIGNATURE", "NO_IMAGE",
    "IMAGE_OTHER",
)  # fmt: skip
_BLOCKS = (
    "SAFETY", "OTHER", "BLOCKLIST", "PROHIBITED_CONTENT", "IMAGE_SAFETY", "MODEL_ARMOR",
    "JAILBREAK", "BLOCKED_REASON_UNSPECIFIED",
)  # fmt: skip

# Gemini's `finishReason`; a prompt blocked before any candidate is `blocked:<blockReason>`, a
# refusal of the request. Safety, recitation, blocklist, prohibited content and personal data
# stops are the provider's filters; tool and language stops are not a document's end.
GEMINI = Profile(
    name="gemini",
    display_name="Gemini",
    aliases=frozenset({"google", "google_genai"}),
    stop_reasons={
        "STOP": StopReason.END_TURN,
        "MAX_TOKENS": StopReason.MAX_TOKENS,
        **dict.fromkeys(_FILTERS, StopReason.CONTENT_FILTER),
        **dict.fromkeys(_NOT_AN_END, StopReason.OTHER),
        **{f"blocked:{reason}": StopReason.REFUSAL for reason in _BLOCKS},
    },
    dialect=GEMINI_DIALECT,
    carries={"documents": "response_json_schema, application/json"},
    pricing=Pricing("google", output_excludes_reasoning=True),
    telemetry_name="gcp.gemini",
    provider="sdk.providers.gemini:GeminiProvider",
)

PROFILES = (GEMINI,)
