"""Field validation shared by the pool and pod documents: a checker that collects every error with
its field path, and Kubernetes' own syntax rules for names, label keys and values (apimachinery
validation), so whatever we put on nodes the cluster will accept. Pure: no Django."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from typing import Any

from pools.core.durations import parse_duration
from pools.core.errors import FieldError, control_characters

# Kubernetes' own syntax rules (apimachinery validation), so whatever we put on nodes the
# cluster will accept. `\Z`, not `$`: Python's `$` also matches before a final newline, which
# Go's regexps (and so the API server) refuse.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
MAX_ANNOTATIONS_BYTES = 256 * 1024  # kube-apiserver's TotalAnnotationSizeLimitB
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")


class Checker:
    """Collects field errors while walking the document."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def mapping(self, value: Any, path: str, known: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            self.error(path, "must be a mapping")
            return {}
        for key in value:
            if not isinstance(key, str):  # YAML's `~:`, `1:` or `yes:`: a path of `spec.None` named nothing the author wrote
                self.error(path, f"a field name must be a string: a key here is read as {read_as(key)} (quote it)")
            elif key not in known:
                self.error(f"{path}.{key}" if path else str(key), "unknown field")
        for key in required:
            if key not in value:
                self.error(f"{path}.{key}" if path else key, "required field is missing")
        return value

    def document(self, value: Any, *, api_version: str, kind: str, known: tuple[str, ...], required: tuple[str, ...],
                 metadata: tuple[str, ...]) -> tuple[dict, dict]:  # fmt: skip
        """The top of a Kubernetes-style document, apiVersion and kind checked, and its metadata
        (with a name)."""
        top = self.mapping(value, "", known, required)
        if "apiVersion" in top and top["apiVersion"] != api_version:
            self.error("apiVersion", f"must be {api_version}")
        if "kind" in top and top["kind"] != kind:
            self.error("kind", f"must be {kind}")
        return top, self.mapping(top.get("metadata", {}), "metadata", metadata, ("name",))

    def namespaced_name(self, metadata: dict, *, default_namespace: str, what: str) -> tuple[Any, Any]:
        """A namespaced object's name (a DNS-1123 subdomain) and namespace (a DNS-1123 label)."""
        name = metadata.get("name")
        if "name" in metadata and not (isinstance(name, str) and len(name) <= 253 and DNS1123_SUBDOMAIN.match(name)):
            self.error("metadata.name", f"invalid {what} name {name!r}: a DNS-1123 subdomain of at most 253 characters")
        namespace = metadata.get("namespace", default_namespace)
        if not (isinstance(namespace, str) and len(namespace) <= 63 and DNS1123_LABEL.match(namespace)):
            self.error("metadata.namespace", f"invalid namespace {namespace!r}: a DNS-1123 label such as algorithm")
        return name, namespace

    def integer(self, value: Any, path: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, "must be an integer")
            return None
        if minimum is not None and value < minimum:
            self.error(path, f"must be at least {minimum}")
            return None
        if maximum is not None and value > maximum:
            self.error(path, f"must be at most {maximum}")
            return None
        return value

    def boolean(self, value: Any, path: str) -> bool | None:
        if not isinstance(value, bool):
            self.error(path, "must be true or false")
            return None
        return value

    def string(self, value: Any, path: str) -> str | None:
        if not isinstance(value, str) or not value:
            self.error(path, "must be a non-empty string")
            return None
        return value

    def choice(self, value: Any, path: str, choices: tuple[str, ...] | frozenset[str] | Mapping, what: str) -> str | None:
        text = self.string(value, path)
        if text is None:
            return None
        if text not in choices:
            self.error(path, f"unknown {what} {text!r}; expected one of {', '.join(sorted(choices))}")
            return None
        return text

    def labels(self, value: Any, path: str) -> dict[str, str]:
        if not isinstance(value, dict):
            self.error(path, "must be a mapping of label keys to values")
            return {}
        result: dict[str, str] = {}
        for key, val in value.items():
            key_error = label_key_error(key)
            if key_error:
                self.error(f"{path}.{key}", key_error)
                continue
            value_error = label_value_error(val)
            if value_error:
                self.error(f"{path}.{key}", value_error)
                continue
            result[key] = val
        return result

    def annotations(self, value: Any, path: str) -> dict[str, str]:
        """metadata.annotations as kube-apiserver's ValidateAnnotations takes them: keys are
        label keys once lower-cased, at most 256 KiB of keys and values in all; values are
        strings, free text without control characters (newline and tab aside)."""
        if not isinstance(value, dict):
            self.error(path, "must be a mapping of strings")
            return {}
        result = {}
        if sum(len(k.encode()) + len(v.encode()) for k, v in value.items() if isinstance(k, str) and isinstance(v, str)) > MAX_ANNOTATIONS_BYTES:
            self.error(path, f"may not be more than {MAX_ANNOTATIONS_BYTES} bytes in all (keys and values)")
        for key, val in value.items():
            if problem := label_key_error(key.lower() if isinstance(key, str) else key):
                self.error(f"{path}.{key}", problem.replace("label key", "annotation key"))
            elif not isinstance(val, str):
                self.error(f"{path}.{key}", "annotation values must be strings (quote numbers and booleans)")
            elif problem := control_characters(val, allowed="\n\t"):
                self.error(f"{path}.{key}", problem)
            else:
                result[key] = val
        return result

    def duration(self, value: Any, path: str) -> int | None:
        if isinstance(value, int) and not isinstance(value, bool):
            seconds = value
        else:
            try:
                seconds = parse_duration(value)
            except ValueError as exc:
                self.error(path, str(exc))
                return None
        if not 0 <= seconds <= 3600:
            self.error(path, "must be between 0s and 1h (the HPA bound)")
            return None
        return seconds


def label_key_error(key: Any) -> str | None:
    """Kubernetes' rule for label (and taint) keys: optional DNS-1123 prefix, '/', a name ≤ 63."""
    if not isinstance(key, str) or not key:
        return "label keys must be non-empty strings"
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return f"invalid label key {key!r}: the prefix before '/' is empty"
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return f"invalid label key {key!r}: the prefix must be a DNS-1123 subdomain"
    if len(name) > 63 or not QUALIFIED_NAME.match(name):
        return (
            f"invalid label key {key!r}: the name must be at most 63 characters of alphanumerics, "
            "'-', '_' or '.', starting and ending with an alphanumeric"
        )
    return None


def label_value_error(value: Any) -> str | None:
    """Kubernetes' rule for label (and taint) values: empty, or ≤ 63 of [A-Za-z0-9-_.]."""
    if not isinstance(value, str):
        return "label values must be strings (quote numbers and booleans)"
    if value and (len(value) > 63 or not QUALIFIED_NAME.match(value)):
        return (
            f"invalid label value {value!r}: at most 63 characters of alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def read_as(value: Any) -> str:
    """What YAML read an unquoted scalar as, named by its value, never by a spelling the author
    may not have written (`yes`, `on` and `true` are all the boolean true; `0x10` the number 16)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, date):
        return f"the date {value.isoformat()}"
    return f"a {type(value).__name__}"


RESERVED_NAMES = frozenset({"new", "import"})  # they name pages of the web console


def name_error(name: Any) -> str | None:
    if name is not None and name != "" and not isinstance(name, str):  # `name: 12345` or `name: 2001-12-14`: there, but no text
        return f"must be a string: it is read as {read_as(name)} (quote it)"
    if not name:
        return "required: a DNS-1123 name such as train-pool-a"
    if name in RESERVED_NAMES:
        return f"{name!r} is reserved; choose another name"
    if len(name) > 63 or not DNS1123_LABEL.match(name):
        return (
            f"invalid name {name!r}: a DNS-1123 label must be at most 63 lower-case alphanumerics "
            "or '-', starting and ending with an alphanumeric"
        )
    return None


