"""Tools as a newcomer writes them: methods, names, strings, lambdas and missing type hints."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from fanloop import Agent, tool
from fanloop.errors import ConfigurationError
from fanloop.testing import ScriptedProvider, call, reply


class Shop:
    def __init__(self, stock: int) -> None:
        self.stock_count = stock

    @tool
    def stock(self, item: str) -> str:
        """How many of an item are in stock.

        Args:
            item: the item's name.
        """
        return f"{self.stock_count} {item}"


async def test_a_tool_decorated_on_a_method_binds_the_instance_and_hides_self() -> None:
    small, big = Shop(1), Shop(99)
    assert list(small.stock.parameters["properties"]) == ["item"]
    assert small.stock.parameters["required"] == ["item"]
    assert small.stock("pears") == "1 pears"  # still callable as the method
    provider = ScriptedProvider([reply(tool_calls=[call("stock", item="pears")]), "ok"])
    await Agent(provider, tools=[big.stock]).run("how many?")
    (result,) = provider.requests[1].messages[-1].tool_results_parts
    assert (result.content, result.is_error) == ("99 pears", False)


async def test_the_class_attribute_of_a_method_tool_is_an_error_result_not_a_crash() -> None:
    provider = ScriptedProvider([reply(tool_calls=[call("stock", item="x")]), "ok"])
    await Agent(provider, tools=[Shop.stock]).run("how many?")
    (result,) = provider.requests[1].messages[-1].tool_results_parts
    assert result.is_error and "tools=[obj.stock]" in result.content


def test_a_plain_bound_method_is_a_tool_too() -> None:
    class Counter:
        def count(self, n: int) -> int:
            """Count."""
            return n

    spec = tool(Counter().count)
    assert spec.name == "count" and list(spec.parameters["properties"]) == ["n"]


def test_a_tool_given_by_name_says_to_pass_the_function() -> None:
    with pytest.raises(ConfigurationError, match=r"not the name 'add'.*tools=\[add\]"):
        Agent(ScriptedProvider(["x"]), tools=["add"])  # type: ignore[list-item]


def test_a_lambda_needs_a_name_and_gets_one_with_tool() -> None:
    with pytest.raises(ConfigurationError, match=r"a lambda has no name.*name="):
        Agent(ScriptedProvider(["x"]), tools=[lambda x: x])
    named = tool(lambda x: x, name="echo")  # type: ignore[call-overload]
    assert named.name == "echo"


def test_names_model_apis_refuse_are_refused_when_the_tool_is_made() -> None:
    def fetch(url: str) -> str:
        """Fetch."""
        return url

    with pytest.raises(ConfigurationError, match="1-64 letters"):
        tool(name="web.fetch")(fetch)
    with pytest.raises(ConfigurationError, match="1-64 letters"):
        tool(name="x" * 65)(fetch)


def test_parameters_without_type_hints_are_reported_once() -> None:
    def loose(a, b: int) -> str:  # type: ignore[no-untyped-def]
        """Loose."""
        return ""

    with capture_logs() as logs:
        made = tool(loose)
    assert made.parameters["properties"]["a"] == {}
    (line,) = [entry for entry in logs if entry["event"] == "tool_untyped_parameters"]
    assert line["tool"] == "loose" and line["parameters"] == ["a"]
