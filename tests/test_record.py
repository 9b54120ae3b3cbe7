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
    """A standard dataclass with ``cls``'s fields (types, defaults, flags) and frozenness, its
    methods compiled by the machinery as usual."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    specs = []
    for f in dataclasses.fields(cls):
        kwargs: dict[str, Any] = {
            "kw_only": f.kw_only,
            "repr": f.repr,
            "compare": f.compare,
            "hash": f.hash,
        }
        if f.default is not dataclasses.MISSING:
            kwargs["default"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            kwargs["default_factory"] = f.default_factory
        specs.append((f.name, f.type, field(**kwargs)))
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


# -- record: a dataclass whose __init__ is compiled on first use ---------------------------


def _records() -> list[type]:
    """Every record class the modules ``import fanloop`` loads define."""
    import sys

    from fanloop._record import _LazyInit

    found = set()
    for name, module in list(sys.modules.items()):
        if not name.startswith("fanloop"):
            continue
        for value in vars(module).values():
            init = vars(value).get("__init__") if isinstance(value, type) else None
            code = getattr(init, "__code__", None)
            if isinstance(init, _LazyInit) or (code and code.co_filename.startswith("<record ")):
                found.add(value)
    return sorted(found, key=lambda c: f"{c.__module__}.{c.__qualname__}")


RECORDS = _records()


def test_fanloop_defines_its_many_small_classes_as_records() -> None:
    names = {c.__qualname__ for c in RECORDS}
    assert {"TextDelta", "ToolFinished", "RetryPolicy", "Limits", "Hooks"} <= names
    assert len(RECORDS) >= 40


@pytest.mark.parametrize("cls", RECORDS, ids=[c.__qualname__ for c in RECORDS])
def test_a_records_init_takes_what_the_dataclass_one_takes(cls: type) -> None:
    import inspect

    mine = inspect.signature(cls)  # looks the __init__ up on the class: compiles it
    theirs = inspect.signature(_twin(cls))
    assert [(p.name, p.kind, repr(p.default)) for p in mine.parameters.values()] == [
        (p.name, p.kind, repr(p.default)) for p in theirs.parameters.values()
    ]
    assert mine.return_annotation is None
    assert type(vars(cls)["__init__"]).__name__ == "function"


def test_a_record_compiles_its_init_on_first_use() -> None:
    from fanloop._record import _LazyInit, record

    made: list[int] = []

    @record(kw_only=False)
    class Base:
        a: int

    @record()
    class Item(Base):
        b: list[int] = field(default_factory=list)
        c: str = "c"

        def __post_init__(self) -> None:
            made.append(self.a)

    assert isinstance(vars(Item)["__init__"], _LazyInit)
    first, second = Item(1), Item(2, c="x")
    assert made == [1, 2] and first.b == [] and first.b is not second.b and second.c == "x"
    assert type(vars(Item)["__init__"]).__name__ == "function"
    assert Item.__init__.__qualname__.endswith("<locals>.Item.__init__")
    assert isinstance(vars(Base)["__init__"], _LazyInit)  # untouched until it is used
    assert Base(5) == Base(5) and Base(5).a == 5
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'a'"):
        Item()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes 2 positional arguments"):
        Base(1, 2)  # type: ignore[call-arg]
    assert Item.__match_args__ == ("a", "b", "c")
    assert dataclasses.replace(first, a=9) == Item(9)


def test_a_frozen_record_is_frozen_as_a_frozen_dataclass_is() -> None:
    import copy
    import pickle

    policy = RetryPolicy(max_retries=1)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field"):
        policy.max_retries = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field"):
        del policy.max_retries  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.other = 1  # type: ignore[attr-defined]
    assert RetryPolicy.__dataclass_params__.frozen  # type: ignore[attr-defined]
    for twin in (pickle.loads(pickle.dumps(policy)), copy.copy(policy), copy.deepcopy(policy)):
        assert twin == policy and hash(twin) == hash(policy)

    @dataclass(frozen=True)
    class Wider(RetryPolicy):
        extra: int = 0

    assert Wider(extra=1).extra == 1
    with pytest.raises(TypeError, match="non-frozen dataclass from a frozen one"):

        @dataclass
        class Thawed(RetryPolicy):
            pass


def test_a_record_refuses_at_definition_what_its_init_could_not_take() -> None:
    from fanloop._record import record

    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):

        @record()
        class Order:
            a: int = 0
            b: int  # type: ignore[misc]

    with pytest.raises(TypeError, match="all in __init__"):

        @record()
        class Hidden:
            a: int = field(default=0, init=False)

    @dataclass
    class Thawed:
        a: int = 0

    with pytest.raises(TypeError, match="frozen dataclass from a non-frozen one"):

        @record(frozen=True)
        class Frozen(Thawed):
            pass
