"""Builds ``cassettes.json`` from pydantic-ai's VCR cassettes (see README.md).

Run by hand, never by the tests (it needs PyYAML and a checkout of pydantic/pydantic-ai)::

    python _convert.py /path/to/pydantic-ai > cassettes.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

ROOT = "tests/models/cassettes/test_openai_responses/"
# (cassette, interaction numbers): POST /v1/responses only; see README.md for the choice.
CHOSEN: list[tuple[str, tuple[int, ...]]] = [
    # streamed
    (ROOT + "test_openai_responses_stream.yaml", (0, 1)),
    (ROOT + "test_openai_responses_streaming_usage.yaml", (0,)),
    (ROOT + "test_openai_responses_phase_streamed_on_part_start.yaml", (0, 1)),
    (ROOT + "test_openai_responses_model_web_search_tool_stream.yaml", (0,)),
    (ROOT + "test_openai_responses_model_file_search_tool_stream.yaml", (3,)),
    (ROOT + "test_openai_responses_model_mcp_server_tool_stream.yaml", (0,)),
    (
        ROOT + "test_openai_responses_model_mcp_list_tools_stream_backfills_missing_results.yaml",
        (0,),
    ),
    (ROOT + "test_openai_responses_thinking_with_code_execution_tool_stream.yaml", (0,)),
    (ROOT + "test_openai_responses_moderation_stream.yaml", (0,)),
    (ROOT + "test_openai_include_raw_annotations_streaming.yaml", (0,)),
    (ROOT + "test_openai_conversation_id_streaming_provider_details.yaml", (1,)),
    (ROOT + "test_background_mode_streaming_vcr.yaml", (0,)),
    (ROOT + "test_openai_responses_raw_cot_stream_openrouter.yaml", (0,)),
    # not streamed
    (ROOT + "test_openai_responses_model_simple_response.yaml", (0,)),
    (ROOT + "test_openai_responses_model_simple_response_with_tool_call.yaml", (0, 1)),
    (ROOT + "test_openai_responses_thinking_with_tool_calls.yaml", (0, 1)),
    (ROOT + "test_openai_responses_requires_function_call_status_none.yaml", (0, 1)),
    (ROOT + "test_openai_responses_history_with_combined_tool_call_id.yaml", (0,)),
    (ROOT + "test_openai_responses_phase_live.yaml", (0, 1)),
    (ROOT + "test_openai_responses_model_thinking_part.yaml", (0, 1)),
    (ROOT + "test_openai_responses_thinking_with_modified_history.yaml", (0, 1, 2)),
    (ROOT + "test_reasoning_summary_auto.yaml", (0,)),
    (ROOT + "test_gpt5_pro.yaml", (0,)),
    (ROOT + "test_openai_responses_model_web_search_tool.yaml", (0, 1)),
    (ROOT + "test_openai_responses_model_builtin_tools_web_search.yaml", (0,)),
    (ROOT + "test_openai_responses_model_file_search_tool.yaml", (3,)),
    (ROOT + "test_openai_responses_model_mcp_server_tool.yaml", (0, 1)),
    (ROOT + "test_openai_responses_thinking_with_code_execution_tool.yaml", (0, 1)),
    (ROOT + "test_openai_responses_compact_stateful_mode.yaml", (2,)),
    (ROOT + "test_openai_responses_moderation_block_policy.yaml", (0,)),
    (ROOT + "test_openai_responses_model_http_error.yaml", (0,)),
    (ROOT + "test_native_output.yaml", (0, 1)),
    (ROOT + "test_background_mode_vcr.yaml", (0,)),
    ("tests/cassettes/test_native_tool_search_vcr/test_openai_native_tool_search.yaml", (0,)),
]
KEEP_HEADERS = ("content-type", "x-request-id")


def _one(source: str, number: int, recorded: dict[str, Any]) -> dict[str, Any]:
    request, response = recorded["request"], recorded["response"]
    assert request["method"] == "POST" and request["uri"].endswith("/responses"), source
    body = request.get("parsed_body")
    if body is None:
        body = json.loads(request["body"])
    answer = response.get("body")
    if isinstance(answer, dict) and isinstance(answer.get("string"), str):
        text = answer["string"]  # the bytes as recorded (an event stream)
    else:
        text = json.dumps(response["parsed_body"], separators=(",", ":"))
    headers = {k: v[0] for k, v in response["headers"].items() if k in KEEP_HEADERS}
    headers.setdefault(
        "content-type", "text/event-stream" if body.get("stream") else "application/json"
    )
    name = Path(source).stem.removeprefix("test_").removeprefix("openai_responses_")
    return {
        "name": f"{name}-{number}",
        "source": f"{source}#{number}",
        "request": body,
        "status": response["status"]["code"],
        "headers": headers,
        "body": text,
    }


def main(checkout: str) -> None:
    out = []
    for source, numbers in CHOSEN:
        recorded = yaml.safe_load((Path(checkout) / source).read_text())["interactions"]
        out += [_one(source, n, recorded[n]) for n in numbers]
    json.dump({"interactions": out}, sys.stdout, indent=0, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
