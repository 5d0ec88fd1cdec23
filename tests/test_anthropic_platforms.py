"""AnthropicProvider on Amazon Bedrock and Google Vertex AI, through the `anthropic` package's own
platform clients on a mocked transport: the same structured-output request, each platform's
route, what each platform does not offer refused before sending, and their credentials kept out
of errors."""

from __future__ import annotations

import json
import traceback

import anthropic
import httpx2
import pytest

from contracts import Decision
from sdk import PDF
from sdk import Backoff
from sdk import ProviderError
from sdk import StructuredClient
from sdk import UnsupportedRequest
from sdk.providers import AnthropicProvider
from tests.wire_support import DECISION
from tests.wire_support import Wire
from tests.wire_support import anthropic_reply
from tests.wire_support import error_reply

AWS_SECRET = "aws-SECRET-wJalrXUtnFEMI-K7MDENG-bPxRfiCY"
VERTEX_TOKEN = "ya29.SECRET-vertex-token-8f7e6d5c"


def _bedrock(wire: Wire) -> anthropic.AnthropicBedrock:
    return anthropic.AnthropicBedrock(
        aws_access_key="AKIAIOSFODNN7EXAMPLE",
        aws_secret_key=AWS_SECRET,
        aws_region="us-east-1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(wire)),
    )


def _vertex(wire: Wire) -> anthropic.AnthropicVertex:
    return anthropic.AnthropicVertex(
        region="us-east5",
        project_id="acme-prod",
        access_token=VERTEX_TOKEN,
        http_client=httpx2.Client(transport=httpx2.MockTransport(wire)),
    )


@pytest.mark.parametrize("platform", ["bedrock", "vertex"])
def test_the_structured_output_request_goes_to_each_platforms_route(platform: str) -> None:
    wire = Wire(anthropic_reply(text=json.dumps(DECISION)))
    client = _bedrock(wire) if platform == "bedrock" else _vertex(wire)
    provider = AnthropicProvider(client, model="claude-sonnet-4-6")
    assert provider.platform == platform
    result = StructuredClient(provider).generate(Decision, prompt="Approve?")
    assert result.value.answer == "approve"
    request = wire.requests[0]
    path = request.url.path
    if platform == "bedrock":
        assert path.startswith("/model/claude-sonnet-4-6/invoke")
        assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256")
    else:
        assert "/projects/acme-prod/locations/us-east5/publishers/anthropic/models/" in path
        assert path.endswith("claude-sonnet-4-6:rawPredict")
    body = wire.body
    assert body["output_config"]["format"]["type"] == "json_schema"
    assert "model" not in body  # the platforms take the model in the route


def test_vertex_refuses_a_model_without_structured_outputs_before_sending() -> None:
    wire = Wire(anthropic_reply())
    with pytest.raises(UnsupportedRequest, match="claude-sonnet-4-6") as info:
        AnthropicProvider(_vertex(wire), model="claude-3-5-haiku@20241022")
    assert "Vertex" in str(info.value)
    assert wire.requests == []


def test_bedrock_refuses_url_parts_before_sending() -> None:
    wire = Wire(anthropic_reply(text=json.dumps(DECISION)))
    provider = AnthropicProvider(_bedrock(wire), model="claude-sonnet-4-6")
    with pytest.raises(UnsupportedRequest, match="URLs"):
        StructuredClient(provider).generate(
            Decision, prompt=["Read", PDF(url="https://files.test/invoice.pdf")]
        )
    assert wire.requests == []


@pytest.mark.parametrize("platform", ["bedrock", "vertex"])
def test_platform_credentials_stay_out_of_errors(platform: str) -> None:
    wire = Wire(error_reply("anthropic_error_500.json", 500))
    client = _bedrock(wire) if platform == "bedrock" else _vertex(wire)
    provider = AnthropicProvider(client, model="claude-sonnet-4-6")
    with pytest.raises(ProviderError) as info:
        StructuredClient(provider, backoff=Backoff(retries=0)).generate(Decision, prompt="x")
    shown = "".join(traceback.format_exception(info.value)) + repr(provider)
    shown += "".join(repr(a) for a in info.value.attempts)
    assert AWS_SECRET not in shown and VERTEX_TOKEN not in shown
    assert len(wire.requests) == 1  # the platform client's own retries are off
