"""Dataclasses with shared ``__eq__``/``__hash__``/``__repr__`` (fanloop._record) behave as the
ones the dataclass machinery compiles: checked against twins it builds from the same fields."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest

from fanloop import ContextPolicy, Hooks, Limits, RetryPolicy
from fanloop._config import Concurrency
from fanloop._record import by_fields
from fanloop.events import TextDelta, ToolStarted
from fanloop.testing import call


def _twin(cls: type) -> type:
    """A standard dataclass with ``cls``'s fields and flags, its methods compiled as usual."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    specs = [
        (
            f.name,
            Any,
            field(
                default=None,
                repr=f.repr,
                compare=f.compare,
                hash=f.hash,
            ),
        )
        for f in dataclasses.fields(cls)
    ]
    return dataclasses.make_dataclass(cls.__qualname__, specs, frozen=params.frozen)


@by_fields
@dataclass(frozen=True, eq=False, repr=False)
class Point:
    x: int
    y: int = 0
    note: str = field(default="", compare=False)
    secret: str = field(default="", repr=False)
    label: str = field(default="", hash=False)


@by_fields
@dataclass(slots=True, eq=False, repr=False)
class Box:
    items: list[Any] = field(default_factory=list)


def _check_like_twin(a: Any, b: Any) -> None:
    """``a`` and ``b`` (of one class) compare, hash and show as their twins do."""
    cls = type(a)
    twin = _twin(cls)
    for x, y in [(a, a), (a, b), (b, a)]:
        tx = twin(**{f.name: getattr(x, f.name) for f in dataclasses.fields(cls)})
        ty = twin(**{f.name: getattr(y, f.name) for f in dataclasses.fields(cls)})
        assert (x == y) is (tx == ty)
        assert (x != y) is (tx != ty)
        assert repr(x) == repr(tx)
        if twin.__hash__ is None:
            assert cls.__hash__ is None
        else:
            try:
                expected: Any = hash(tx)
            except TypeError as exc:  # a field that is not hashable: the same error
                expected = type(exc)
            if expected is TypeError:
                with pytest.raises(TypeError):
                    hash(x)
            else:
                assert hash(x) == expected
    assert (a == object()) is False


PAIRS = [
    (Point(1, 2, "n", "s", "l"), Point(1, 3)),
    (Box([1]), Box([2])),
    (Limits(max_turns=3), Limits(max_turns=4)),
    (RetryPolicy(max_retries=1), RetryPolicy(max_retries=2)),
    (Concurrency(max_concurrency=1), Concurrency(max_concurrency=2)),
    (ContextPolicy(compact_threshold=0.5), ContextPolicy(compact_threshold=0.6)),
]


@pytest.mark.parametrize(("a", "b"), PAIRS, ids=[type(a).__name__ for a, _ in PAIRS])
def test_shared_methods_behave_as_the_compiled_ones(a: Any, b: Any) -> None:
    _check_like_twin(a, b)


def test_field_flags_are_kept() -> None:
    assert Point(1, note="a") == Point(1, note="b")  # compare=False
    assert Point(1, label="a") != Point(1, label="b")  # compared, but not hashed
    assert hash(Point(1, label="a")) == hash(Point(1, label="b"))
    assert "secret" not in repr(Point(1, secret="s"))
    assert repr(Point(1, 2)) == "Point(x=1, y=2, note='', label='')"
    with pytest.raises(TypeError, match="unhashable"):
        hash(Box())


def test_a_value_that_holds_the_instance_is_shown_once() -> None:
    box = Box()
    box.items.append(box)
    assert repr(box) == "Box(items=[...])"


def test_subclasses_compare_and_show_their_own_fields() -> None:
    a, b = TextDelta("x", agent_path=("a",)), TextDelta("x", agent_path=("a",))
    assert a == b and a != TextDelta("y", agent_path=("a",))
    assert a != ToolStarted(call=call("x")) and TextDelta.__hash__ is None
    assert repr(a) == "TextDelta(agent_path=('a',), parent_call_id=None, text='x')"
    assert Hooks() == Hooks() and hash(Hooks()) == hash(Hooks())


def test_only_dataclasses_without_their_own_methods_are_taken() -> None:
    class Plain:
        pass

    with pytest.raises(TypeError, match="eq=False, repr=False"):
        by_fields(Plain)
    with pytest.raises(TypeError, match="eq=False, repr=False"):
        by_fields(dataclass(type("Compiled", (), {"__annotations__": {"x": "int"}})))

    @dataclass(eq=False, repr=False)
    class Own:
        x: int = 0

        def __repr__(self) -> str:
            return "mine"

    with pytest.raises(TypeError, match="defines __eq__, __hash__ or __repr__"):
        by_fields(Own)
