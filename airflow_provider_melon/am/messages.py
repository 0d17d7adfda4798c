"""The JSON Schema of the executor's messages to the ApplicationMaster (``POST /register``, ``POST /heartbeat``),
generated from their one declaration, ``runtime.protocol``'s TypedDicts, and committed as
``am/messages.schema.json``, which the AM's jar carries and checks every body against. Development time only (it
needs pydantic); rewrite the file with ``python -m airflow_provider_melon.am.messages --write``."""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any, Literal

import typing_extensions
from pydantic import TypeAdapter

from airflow_provider_melon.runtime.protocol import HeartbeatBody, RegisterBody

MESSAGES_SCHEMA_PATH = Path(__file__).resolve().parent / "messages.schema.json"
#: the AM's name for each message (``$defs`` of the schema): the path it is posted to
MESSAGES = {"register": RegisterBody, "heartbeat": HeartbeatBody}
#: built at run time from a declaration, so untyped for mypy
_TYPED_DICT: Any = typing_extensions.TypedDict


def _for_pydantic(tp: Any, seen: dict[type, Any]) -> Any:
    """``tp`` with each ``typing.TypedDict`` in it rebuilt as a ``typing_extensions.TypedDict`` (pydantic reads only
    those before Python 3.12; the runtime, stdlib only, declares the former), keys, required-ness, ``Annotated``
    metadata and docstring kept."""
    if typing.is_typeddict(tp):
        if tp not in seen:
            hints = typing.get_type_hints(tp, include_extras=True)
            fields = {
                name: _for_pydantic(hint, seen)
                if name in tp.__required_keys__
                else typing_extensions.NotRequired[_for_pydantic(hint, seen)]
                for name, hint in hints.items()
            }
            rebuilt = _TYPED_DICT(tp.__name__, fields)
            rebuilt.__doc__ = tp.__doc__
            seen[tp] = rebuilt
        return seen[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return typing.Annotated[(_for_pydantic(args[0], seen), *tp.__metadata__)]
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_for_pydantic(a, seen) for a in args)]
    return tp  # a plain type, or one with no TypedDict inside (the messages' dicts are of numbers)


def _closed(schema: Any) -> None:
    """Every object with declared properties takes no others: a field the AM does not know is refused, naming it,
    not silently dropped."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" and "properties" in schema:
            schema.setdefault("additionalProperties", False)
        for value in schema.values():
            _closed(value)
    elif isinstance(schema, list):
        for value in schema:
            _closed(value)


def messages_schema() -> dict[str, Any]:
    """``{"$defs": {"register": ..., "heartbeat": ..., <their parts>}}``: the AM validates a body against
    ``{"$ref": "#/$defs/<message>"}``."""
    seen: dict[type, Any] = {}
    adapters: list[tuple[str, Literal["validation"], TypeAdapter[Any]]] = [
        (name, "validation", TypeAdapter(_for_pydantic(tp, seen))) for name, tp in MESSAGES.items()
    ]
    refs, schema = TypeAdapter.json_schemas(adapters)
    defs: dict[str, Any] = schema["$defs"]
    for (name, _), ref in refs.items():
        defs[name] = {"$ref": ref["$ref"]}
    _closed(schema)
    schema["title"] = "The executor's messages to the MeLoN ApplicationMaster"
    return schema


def messages_schema_text() -> str:
    """The schema as committed in :data:`MESSAGES_SCHEMA_PATH`."""
    return json.dumps(messages_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # python -m airflow_provider_melon.am.messages --write
    import sys

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m airflow_provider_melon.am.messages --write")
    MESSAGES_SCHEMA_PATH.write_text(messages_schema_text())
    print(f"wrote {MESSAGES_SCHEMA_PATH}")
