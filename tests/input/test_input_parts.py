"""ImagePart and DocumentPart: validation, caps, JSON, tool results carrying them, estimates."""

from __future__ import annotations

import base64

import pydantic
import pytest
from input_media import GIF, JPEG, PDF, PNG, WEBP

from fanloop import ToolResult
from fanloop._context import _chars
from fanloop._runner import user_message as _user_message
from fanloop.errors import ConfigurationError
from fanloop.limits import DOCUMENT_TOKENS, IMAGE_TOKENS, estimate_input
from fanloop.messages import (
    MAX_PART_BYTES,
    MAX_RESULT_PARTS,
    DocumentPart,
    ImagePart,
    Message,
    TextPart,
    ToolResultPart,
)
from fanloop.providers import ModelRequest
from fanloop.tools.base import to_result

OVER = b"\x89PNG" + b"\0" * (MAX_PART_BYTES - 3)  # one byte over the cap


@pytest.mark.parametrize(
    ("data", "media_type"),
    [(PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (WEBP, "image/webp")],
)
def test_image_type_is_read_from_its_bytes(data: bytes, media_type: str) -> None:
    assert ImagePart(data=data).media_type == media_type
    assert ImagePart(data=data, media_type=media_type).media_type == media_type


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of data= and url="),
        ({"data": PNG, "url": "https://x.test/a.png"}, "exactly one of data= and url="),
        ({"data": b"no signature"}, "pass media_type="),
        ({"data": PNG, "media_type": "image/jpeg"}, "is image/png, but media_type says"),
        ({"data": PNG, "media_type": "image/bmp"}, "image/png"),
        ({"data": PNG, "media_type": "application/pdf"}, "image/webp"),
        ({"url": "file:///etc/passwd"}, "http:// or https://"),
        ({"url": "https://x.test/a b.png"}, "without spaces"),
        ({"url": "https://x.test/\x00.png"}, "control characters"),
        ({"url": "https://x.test/" + "a" * 9000}, "over the limit of 8192"),
        ({"url": "data:image/png,notbase64"}, "must be base64"),
        ({"url": "data:image/png;base64,@@@"}, "not valid base64"),
        ({"data": PNG, "extra": 1}, "Extra inputs"),
    ],
)
def test_bad_images_are_refused_with_a_reason(kwargs: dict, message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=message):
        ImagePart(**kwargs)


def test_an_image_over_the_cap_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValueError, match=r"over the limit of 20 MiB for one part") as info:
        ImagePart(data=OVER, media_type="image/png")
    assert len(str(info.value)) < 2_000
    ImagePart(data=OVER[:-1], media_type="image/png")  # exactly the cap is fine


def test_a_data_url_becomes_data() -> None:
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert ImagePart(url=url) == ImagePart(data=PNG, media_type="image/png")
    doc = DocumentPart(url="data:application/pdf;base64," + base64.b64encode(PDF).decode())
    assert doc.data == PDF and doc.url is None
    huge = "data:image/png;base64," + "A" * (MAX_PART_BYTES * 4 // 3 + 100)
    with pytest.raises(ValueError, match="over the limit"):
        ImagePart(url=huge)


def test_a_url_image_keeps_its_address() -> None:
    image = ImagePart(url="https://example.com/cat.webp")
    assert (image.data, image.url, image.media_type) == (None, "https://example.com/cat.webp", None)


def test_documents() -> None:
    doc = DocumentPart(data=PDF, title="Q3 report")
    assert (doc.kind, doc.media_type, doc.title) == ("document", "application/pdf", "Q3 report")
    assert DocumentPart(url="https://example.com/a.pdf").url == "https://example.com/a.pdf"
    for kwargs in (
        {},
        {"data": PDF, "url": "https://example.com/a.pdf"},
        {"data": PDF, "media_type": "text/plain"},
        {"data": PDF, "title": "t" * 257},
        {"url": "ftp://example.com/a.pdf"},
    ):
        with pytest.raises(pydantic.ValidationError):
            DocumentPart(**kwargs)
    with pytest.raises(ValueError, match="the document is"):
        DocumentPart(data=b"%PDF-" + b"\0" * MAX_PART_BYTES)


def test_repr_shows_the_size_not_the_bytes() -> None:
    secret = PNG + b"SECRET" * 100
    assert "SECRET" not in repr(ImagePart(data=secret))
    assert f"<{len(secret):,} bytes>" in repr(ImagePart(data=secret))
    assert "SECRET" not in repr(DocumentPart(data=PDF + b"SECRET"))
    assert "SECRET" not in repr(
        ToolResultPart(call_id="c", content="", parts=(ImagePart(data=secret),))
    )


def test_messages_with_media_round_trip_through_json() -> None:
    binary = PNG + bytes(range(256))  # not UTF-8
    message = Message(
        role="user",
        content=(
            TextPart(text="What is this?"),
            ImagePart(data=binary),
            ImagePart(url="https://example.com/a.gif", media_type="image/gif"),
            DocumentPart(data=PDF, title="doc"),
            ToolResultPart(call_id="c1", content="see", parts=(ImagePart(data=JPEG),)),
        ),
    )
    text = message.model_dump_json()
    assert base64.b64encode(binary).decode()[:20] in text.replace("-", "+").replace("_", "/")
    assert Message.model_validate_json(text) == message
    assert Message.model_validate(message.model_dump()) == message
    assert Message.model_validate(message.model_dump(mode="json")) == message


def test_tool_result_parts_are_checked() -> None:
    image = ImagePart(data=PNG)
    assert ToolResult("x", parts=[image]).parts == (image,)  # a list is kept as a tuple
    with pytest.raises(TypeError, match="ImagePart and DocumentPart only"):
        ToolResult("x", parts=(TextPart(text="no"),))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"over the limit of {MAX_RESULT_PARTS}"):
        ToolResult("x", parts=(image,) * (MAX_RESULT_PARTS + 1))
    half = ImagePart(data=PNG + b"\0" * (MAX_PART_BYTES // 2))
    with pytest.raises(ValueError, match="of images and documents, over the limit"):
        ToolResult("x", parts=(half, half))
    with pytest.raises(pydantic.ValidationError, match="over the limit"):
        ToolResultPart(call_id="c", content="", parts=(image,) * (MAX_RESULT_PARTS + 1))


def test_tools_may_return_media() -> None:
    image, doc = ImagePart(data=PNG), DocumentPart(data=PDF)
    assert to_result(image) == ToolResult("", parts=(image,))
    assert to_result([TextPart(text="a"), image, TextPart(text="b"), doc]) == ToolResult(
        "a\nb", parts=(image, doc)
    )
    assert to_result(["plain", "list"]).content == '["plain", "list"]'  # as before


def test_prompts_of_parts() -> None:
    image = ImagePart(data=PNG)
    message = _user_message(["What is this?", image])
    assert message == Message(role="user", content=(TextPart(text="What is this?"), image))
    assert _user_message(image).content == (image,)
    assert _user_message((TextPart(text="a"),)).content == (TextPart(text="a"),)
    with pytest.raises(ConfigurationError, match="not one holding ToolResultPart"):
        _user_message([ToolResultPart(call_id="c", content="x")])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="cannot be bytes"):
        _user_message(PNG)  # type: ignore[arg-type]


def test_estimates_count_media() -> None:
    big_pdf = DocumentPart(data=PDF + b"\0" * 2_000_000)
    plain = Message.user("hi")
    with_media = Message(
        role="user",
        content=(
            TextPart(text="hi"),
            ImagePart(data=PNG),
            DocumentPart(data=PDF),
            ToolResultPart(call_id="c", content="", parts=(ImagePart(data=PNG),)),
        ),
    )
    base = estimate_input(ModelRequest(messages=(plain,))).tokens
    more = estimate_input(ModelRequest(messages=(with_media,))).tokens
    assert more - base >= 2 * IMAGE_TOKENS + DOCUMENT_TOKENS
    big = estimate_input(ModelRequest(messages=(Message(role="user", content=(big_pdf,)),)))
    assert big.tokens > 30_000  # a 2 MB PDF is many pages
    # The context check's running estimate (characters, four to a token) counts them too.
    assert _chars(with_media) // 4 >= 2 * IMAGE_TOKENS + DOCUMENT_TOKENS
