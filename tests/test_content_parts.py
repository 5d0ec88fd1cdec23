"""Images and PDFs in messages: each provider's blocks, asserted on the request bodies the real
SDK clients send; a provider that cannot take a part refuses before sending anything."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest

from contracts import Decision
from sdk import PDF
from sdk import Image
from sdk import ProviderError
from sdk import StructuredClient
from sdk import Text
from sdk import UnsupportedRequest
from sdk.providers import AnthropicProvider
from sdk.providers import LlamaCppProvider
from sdk.providers import OllamaProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers import TestProvider
from sdk.providers import VLLMProvider
from tests.wire_support import DECISION
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import chat_reply
from tests.wire_support import openai_client
from tests.wire_support import responses_reply

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + b"\x00" * 16
PDF_BYTES = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\ntrailer << >>\n%%EOF\n"
TEXT = json.dumps(DECISION)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _prompt() -> list[Any]:
    return ["Approve this invoice?", Image(data=PNG, media_type="image/png"), PDF(data=PDF_BYTES)]


def test_anthropic_gets_image_and_document_blocks() -> None:
    wire = Wire(anthropic_reply(text=TEXT))
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    StructuredClient(provider).generate(Decision, prompt=_prompt(), source="INV-7781 total 4180")
    content = wire.body["messages"][0]["content"]
    assert content[0] == {"type": "text", "text": "Approve this invoice?"}
    assert content[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": _b64(PNG)},
    }
    assert content[2]["type"] == "document"
    assert base64.b64decode(content[2]["source"]["data"]) == PDF_BYTES
    assert content[3]["type"] == "text" and "INV-7781 total 4180" in content[3]["text"]


def test_anthropic_takes_urls_as_url_sources() -> None:
    wire = Wire(anthropic_reply(text=TEXT))
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    parts = ["Total?", Image(url="https://example.test/a.png"), PDF(url="https://example.test/a.pdf")]
    StructuredClient(provider).generate(Decision, messages=[{"role": "user", "content": parts}])
    content = wire.body["messages"][0]["content"]
    assert content[1]["source"] == {"type": "url", "url": "https://example.test/a.png"}
    pdf_source = {"type": "url", "url": "https://example.test/a.pdf"}
    assert content[2] == {"type": "document", "source": pdf_source}


def test_openai_responses_gets_input_image_and_file() -> None:
    wire = Wire(responses_reply(text=TEXT))
    provider = OpenAIResponsesProvider(openai_client(wire), model="gpt-5.1-mini")
    StructuredClient(provider).generate(Decision, prompt=_prompt())
    content = wire.body["input"][0]["content"]
    assert content[0] == {"type": "input_text", "text": "Approve this invoice?"}
    assert content[1]["type"] == "input_image"
    assert content[1]["image_url"].startswith("data:image/png;base64,")
    assert content[2]["type"] == "input_file" and content[2]["filename"] == "document.pdf"
    assert content[2]["file_data"] == "data:application/pdf;base64," + _b64(PDF_BYTES)


def test_openai_chat_gets_image_url_and_file_parts_and_refuses_a_pdf_url() -> None:
    wire = Wire(chat_reply(text=TEXT))
    provider = OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini")
    StructuredClient(provider).generate(Decision, prompt=_prompt())
    content = wire.body["messages"][0]["content"]
    assert content[1] == {"type": "image_url", "image_url": {"url": Image(
        data=PNG, media_type="image/png").data_url()}}  # fmt: skip
    assert content[2]["type"] == "file" and content[2]["file"]["filename"] == "document.pdf"
    with pytest.raises(UnsupportedRequest, match="PDF URL"):
        StructuredClient(provider).generate(Decision, prompt=["x", PDF(url="https://e.test/a.pdf")])
    assert len(wire.requests) == 1  # the refused request was never sent


def test_vllm_takes_images_not_pdfs_and_llamacpp_takes_neither() -> None:
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        body = {"id": "c", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": TEXT}}]}  # fmt: skip
        return httpx.Response(200, json=body)

    client = httpx.Client(transport=httpx.MockTransport(handler))
    vllm = VLLMProvider("http://v.test", model="m", http_client=client)
    image_only = ["x", Image(data=PNG, media_type="image/png")]
    StructuredClient(vllm).generate(Decision, prompt=image_only)
    assert sent[0]["messages"][0]["content"][1]["type"] == "image_url"
    with pytest.raises(UnsupportedRequest, match="vllm"):
        StructuredClient(vllm).generate(Decision, prompt=["x", PDF(data=PDF_BYTES)])
    for mode in ("json_schema", "openai"):
        llama = LlamaCppProvider("http://l.test", mode=mode, http_client=client)  # type: ignore[arg-type]
        with pytest.raises(UnsupportedRequest, match="llamacpp"):
            StructuredClient(llama).generate(Decision, prompt=image_only)
    assert len(sent) == 1


def test_ollama_puts_image_bytes_in_its_images_field() -> None:
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        message = {"role": "assistant", "content": TEXT}
        body = {"model": "m", "done": True, "done_reason": "stop", "message": message}
        return httpx.Response(200, json=body)

    client = httpx.Client(transport=httpx.MockTransport(handler))
    provider = OllamaProvider("http://o.test", model="m", http_client=client)
    StructuredClient(provider).generate(
        Decision, system="Review.", prompt=["Approve?", Image(data=PNG, media_type="image/png")]
    )
    user = sent[0]["messages"][1]
    assert user["content"] == "Approve?"
    assert user["images"] == [base64.b64encode(PNG).decode()]


def test_parts_are_checked_when_made(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a PDF"):
        PDF(data=b"<html>")
    with pytest.raises(ValueError, match="media_type"):
        Image(data=PNG, media_type="image/tiff")
    with pytest.raises(ValueError, match="either data"):
        Image(data=PNG, media_type="image/png", url="https://e.test/a.png")
    with pytest.raises(ValueError, match="empty"):
        PDF(data=b"")
    path = tmp_path / "scan.png"
    path.write_bytes(PNG)
    image = Image.from_path(path)
    assert image.media_type == "image/png" and image.data == PNG
    (tmp_path / "bill.pdf").write_bytes(PDF_BYTES)
    assert PDF.from_path(tmp_path / "bill.pdf").name == "bill.pdf"


def test_a_text_part_of_anything_but_text_is_refused_when_made() -> None:
    """`Text(b"...")` failed only in the call, with a raw error from deep inside it (with a
    response cache, `AttributeError` from its key; `Text(5)`, from the check for lone
    surrogates): refused when made, with `TypeError` naming what it got."""
    for wrong in (b"Approve?", 5, None):
        with pytest.raises(TypeError, match=f"Text takes a str, not {type(wrong).__name__}"):
            Text(wrong)  # type: ignore[arg-type]
    assert Text("Approve?").text == "Approve?"


def test_an_image_or_pdf_field_of_anything_but_text_is_refused_when_made() -> None:
    """`PDF(name=5)`, an image's `media_type=5` or a `url` given as bytes failed only in a
    call with a response cache, with a raw `TypeError` from its key: refused when made,
    naming the field."""
    cases: list[tuple[Any, str]] = [
        (lambda: PDF(data=b"%PDF-1.7", name=5), "PDF name must be a str, not int"),
        (lambda: PDF(url=b"https://example.test/a.pdf"), "PDF url must be a str or None"),
        (lambda: Image(url="https://example.test/a.png", media_type=5), "Image media_type"),
        (lambda: Image(url=b"https://example.test/a.png"), "Image url must be a str or None"),
    ]
    for make, said in cases:
        with pytest.raises(TypeError, match=said):
            make()
    assert PDF(url="https://example.test/a.pdf").name == "document.pdf"


def test_message_content_of_the_wrong_shape_is_a_clear_error() -> None:
    client = StructuredClient(TestProvider([DECISION]))
    with pytest.raises(ValueError, match="parts are str, Text, Image or PDF"):
        client.generate(Decision, messages=[{"role": "user", "content": ["x", 5]}])
    with pytest.raises(ValueError, match="assistant message holds text only"):
        client.generate(
            Decision,
            messages=[
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [Image(data=PNG, media_type="image/png")]},
                {"role": "user", "content": "y"},
            ],
        )


def test_the_source_stays_the_text_quotes_are_checked_against() -> None:
    provider = TestProvider([DECISION])
    StructuredClient(provider).generate(Decision, prompt=["Read:", PDF(data=PDF_BYTES)],
                                        source="the text of the PDF")  # fmt: skip
    parts = provider.requests[0].messages[0].parts
    assert isinstance(parts[-1], Text) and "the text of the PDF" in parts[-1].text
    assert isinstance(parts[1], PDF)


def test_a_sent_image_never_leaks_into_an_error_body_unbounded() -> None:
    big = Image(data=PNG + b"\x00" * 300_000, media_type="image/png")
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad image"}}
    wire = Wire(httpx2.Response(400, content=json.dumps(error).encode()))
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    with pytest.raises(ProviderError) as info:
        StructuredClient(provider).generate(Decision, prompt=["x", big])
    assert info.value.status_code == 400
    assert "bad image" in str(info.value)
    assert len(str(info.value)) < 2_000 and len(repr(info.value.attempts)) < 5_000
