"""Base of the API's request models: lenient about keys it does not know, and saying so.

Clients written for the server the seeds describe send keys this server does not define, and
old names of some fields. A request model accepts them: an old name listed in ``RENAMED`` is
read as the field it names now; any other unknown key is ignored and remembered, so that the
server can name it in the response's ``warnings`` (a typo stays visible without breaking an
old client). :meth:`RequestModel.ignored_fields` lists them, with their path in the request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ModelWrapValidatorHandler, PrivateAttr, model_validator
from typing_extensions import Self


class RequestModel(BaseModel):
    """A part of a request: unknown keys are ignored and listed by :meth:`ignored_fields`."""

    # NaN and infinities (a -inf mask value, say) must survive the job file's JSON as well.
    model_config = ConfigDict(extra="ignore", ser_json_inf_nan="constants")

    # An old name of a field (as the seeds' clients send it) -> the field's name here.
    RENAMED: ClassVar[Mapping[str, str]] = {}

    _unknown_keys: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_unknown_keys(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if not isinstance(data, Mapping):
            return handler(data)  # e.g. a model instance: it keeps the record it was built with
        data = cls._rename(dict(data))
        model = handler(data)
        model._unknown_keys = [str(key) for key in data if key not in cls.model_fields]
        return model

    @classmethod
    def _rename(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Read old names as the new ones; an old name given beside its new one stays unknown."""
        for old, new in cls.RENAMED.items():
            if old in data and new not in data:
                data[new] = data.pop(old)
        return data

    def ignored_fields(self) -> list[str]:
        """Dotted paths (``kernel.io.args.0.colour``) of every key of the request that was ignored."""
        found = list(self._unknown_keys)
        for name in type(self).model_fields:
            found += [f"{name}.{path}" for path in _ignored_in(getattr(self, name))]
        return found


def _ignored_in(value: object) -> list[str]:
    if isinstance(value, RequestModel):
        return value.ignored_fields()
    if isinstance(value, (list, tuple)):
        return [f"{i}.{path}" for i, item in enumerate(value) for path in _ignored_in(item)]
    return []
