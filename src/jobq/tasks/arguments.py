"""A task's argument type, to and from a job's JSON payload, checked both ways.

A dataclass is converted and checked by msgspec; a pydantic model (the ``pydantic`` extra) by
pydantic. At enqueue the arguments make the round trip a consumer will make, so a value that
would not validate at run is refused at the call, with nothing written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import msgspec

from jobq.core.errors import ConfigError, InvalidArguments

A = TypeVar("A")


class Arguments(Generic[A]):
    """The codec of one argument type: ``encode`` for a payload, ``decode`` for a handler."""

    def __init__(self, kind: str, tp: type[A]) -> None:
        self.type = tp
        self._kind = kind
        self._pydantic = _is_pydantic(tp)
        if not self._pydantic and not dataclasses.is_dataclass(tp):
            raise ConfigError(f"task {kind!r}: its arguments must be a dataclass or a pydantic "
                              f"model, not {getattr(tp, '__name__', tp)!r}")

    def encode(self, args: A) -> dict[str, Any]:
        """The payload of ``args``; InvalidArguments if they would not validate at run."""
        if not isinstance(args, self.type):
            raise InvalidArguments(f"task {self._kind!r} takes {self.type.__name__}, "
                                   f"got {type(args).__name__}")
        if self._pydantic:
            payload: Any = args.model_dump(mode="json")  # type: ignore[attr-defined]
        else:
            payload = msgspec.to_builtins(args)
        self.decode(payload)
        return dict(payload)

    def decode(self, payload: Mapping[str, Any]) -> A:
        """The arguments in ``payload``; InvalidArguments (dead at once) if they do not validate."""
        try:
            if self._pydantic:
                return self.type.model_validate(payload)  # type: ignore[attr-defined, no-any-return]
            return msgspec.convert(payload, self.type, str_keys=True)
        except (msgspec.ValidationError, ValueError, TypeError) as exc:
            # pydantic's ValidationError is a ValueError
            text = " ".join(str(exc).split())
            raise InvalidArguments(f"arguments of {self._kind!r} do not validate as "
                                   f"{self.type.__name__}: {text}") from None


def _is_pydantic(tp: type) -> bool:
    return any(c.__module__.startswith("pydantic") and c.__name__ == "BaseModel"
               for c in getattr(tp, "__mro__", ()))
