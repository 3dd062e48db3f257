"""What `PATCH /api/config` may change of an algorithm's hyperparameters: the base of each
algorithm's `<Name>ConfigPatch` (in its config.py, beside what it may not change)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, field_validator


class HyperparameterPatch(BaseModel):
    """Hyperparameters to change while training; omit what stays (`null` too leaves a value as
    it is, except where it is a value: NULLABLE)."""

    model_config = ConfigDict(extra="forbid")
    NULLABLE: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_only(cls, value: object) -> object:
        """As the schema says: pydantic alone would take `true` as 1 and `"0.1"` as 0.1
        (and, rightly for JSON Schema, 3.0 as the integer 3)."""
        if isinstance(value, (bool, str)):
            raise ValueError("must be a number")
        return value

    def changes(self) -> dict[str, object]:
        """The values to set: those given, and `null` only where it is one."""
        given = self.model_dump(exclude_unset=True)
        return {name: value for name, value in given.items() if value is not None or name in self.NULLABLE}
