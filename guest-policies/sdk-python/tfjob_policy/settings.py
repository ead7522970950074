"""Settings documents read field by field, each error naming its field.

`SettingsReader` wraps the decoded JSON object and records which keys the policy read; `done()` then
refuses every key it did not, so a misspelt setting is an error instead of being ignored. Empty
text, `{}` and `null` all mean "no settings".

The operator checks a policy version's settings once with `validate-settings` and then hands
the same text to every call, starting later calls from the memory that check left behind
(pre-initialised copies). `parsed()` keeps the last parse by text, so with it a hook of that
version does not parse the document again.
"""

import json
import re
from typing import Any, Callable, Dict, List, Optional, TypeVar

from .errors import InvalidSettings

T = TypeVar("T")

_MISSING = object()

# A label value: at most 63 characters, alphanumerics with `-`, `_`, `.` inside.
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?\Z")
# The name part of a label key: a label value that is not empty.
_LABEL_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?\Z")
# A label key's prefix: a DNS subdomain (lower case labels joined by dots).
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*\Z")


# A Kubernetes quantity: a decimal number with an optional exponent or suffix (`500m`, `1.5Gi`).
_QUANTITY = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+|[numkMGTPE]i?)?\Z")


def is_quantity(value: str) -> bool:
    """Whether `value` is spelled as a Kubernetes quantity (`512Mi`, `100m`, `1e3`)."""
    return bool(_QUANTITY.match(value)) and not value.endswith(("ni", "ui", "mi"))


def is_label_value(value: str) -> bool:
    """Whether `value` may be a Kubernetes label value (empty included)."""
    return bool(_LABEL_VALUE.match(value))


def is_label_key(value: str) -> bool:
    """Whether `value` may be a Kubernetes label key: a name, optionally after a DNS subdomain
    prefix and `/` (`team`, `example.com/tier`)."""
    prefix, slash, name = value.partition("/") if "/" in value else ("", "", value)
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(_LABEL_NAME.match(name))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


class SettingsReader:
    """One settings document; read it with the typed getters, then call `done()`."""

    def __init__(self, document: Dict[str, Any], path: str = ""):
        self._document = document
        self._path = path
        self._read: set = set()

    @classmethod
    def parse(cls, text: str) -> "SettingsReader":
        """Decodes `text`; empty text and `null` are `{}`; anything but an object is refused."""
        if text.strip() == "":
            return cls({})
        try:
            document = json.loads(text)
        except ValueError as e:
            raise InvalidSettings(f"settings: not JSON: {e}") from None
        if document is None:
            return cls({})
        if not isinstance(document, dict):
            raise InvalidSettings(f"settings: expected an object, got {_kind(document)}")
        return cls(document)

    def _field(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def _get(self, key: str, default: Any) -> Any:
        self._read.add(key)
        value = self._document.get(key, _MISSING)
        if value is _MISSING or value is None:
            return _MISSING if default is _MISSING else default
        return value

    def _typed(self, key: str, default: Any, check: Callable[[Any], bool], want: str) -> Any:
        value = self._get(key, default)
        if value is _MISSING:
            raise InvalidSettings(f"{self._field(key)}: required")
        if value is not default and not check(value):
            raise InvalidSettings(f"{self._field(key)}: expected {want}, got {_kind(value)}")
        return value

    def string(self, key: str, default: Any = _MISSING) -> Optional[str]:
        """A string field; without `default` it is required."""
        return self._typed(key, default, lambda v: isinstance(v, str), "a string")

    def boolean(self, key: str, default: Any = _MISSING) -> Optional[bool]:
        return self._typed(key, default, lambda v: isinstance(v, bool), "a boolean")

    def integer(self, key: str, default: Any = _MISSING) -> Optional[int]:
        return self._typed(
            key, default, lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"
        )

    def strings(self, key: str, default: Any = _MISSING) -> Optional[List[str]]:
        """A list of strings; an element of another type is named by its index."""
        value = self._typed(key, default, lambda v: isinstance(v, list), "a list")
        if value is default:
            return value
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise InvalidSettings(
                    f"{self._field(key)}[{i}]: expected a string, got {_kind(item)}"
                )
        return list(value)

    def string_map(self, key: str, default: Any = _MISSING) -> Optional[Dict[str, str]]:
        """An object whose values are strings, e.g. labels."""
        value = self._typed(key, default, lambda v: isinstance(v, dict), "an object")
        if value is default:
            return value
        for name, item in value.items():
            if not isinstance(item, str):
                raise InvalidSettings(
                    f"{self._field(key)}[{json.dumps(name)}]: expected a string, got {_kind(item)}"
                )
        return dict(value)

    def object(self, key: str) -> "SettingsReader":
        """A nested object, read the same way (absent: an empty one); call its `done()` too."""
        value = self._typed(key, {}, lambda v: isinstance(v, dict), "an object")
        return SettingsReader(value, self._field(key))

    def done(self) -> None:
        """Refuses the keys no getter read."""
        unknown = sorted(k for k in self._document if k not in self._read)
        if unknown:
            known = ", ".join(sorted(self._read)) or "none"
            raise InvalidSettings(
                f"{self._field(unknown[0])}: unknown field (known fields: {known})"
            )


_last: Dict[str, Any] = {}


def parsed(text: str, parse: Callable[[SettingsReader], T]) -> T:
    """`parse(SettingsReader.parse(text))`, kept by text: the same text is parsed once."""
    key = (parse, text)
    if _last.get("key") != key:
        value = parse(SettingsReader.parse(text))
        _last.clear()
        _last.update(key=key, value=value)
    return _last["value"]
