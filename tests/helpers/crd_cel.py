"""The Kubernetes CEL library functions OpenShift's machine-config CRDs call, for cel-python.

A current kube-apiserver evaluates ``x-kubernetes-validations`` with cel-go plus Kubernetes'
own libraries (k8s.io/apiserver/pkg/cel/library): the 1.20 server of the tests drops the rules,
so tests/helpers/crd_validate.py evaluates them with cel-python (module ``celpy``) and these:

- ``format.dns1123Subdomain()``, ``dns1123Label()``, ``dns1035Label()`` then ``.validate(s)``:
  an optional list of errors, empty (``!hasValue()``) when ``s`` is valid
  (library/format.go, after apimachinery's validation.IsDNS1123Subdomain, IsDNS1123Label,
  IsDNS1035Label);
- ``.hasValue()``, ``.value()``, ``.orValue(x)`` on those optionals (cel-go's optional types);
- ``s.split(sep)`` (cel-go ext/strings.go).

``matches``, ``startsWith``, ``size``, ``has``, ``exists`` and ``timestamp`` are CEL's own
(celpy has them). grep the rules for ``[A-Za-z]+(`` when new CRDs come: an unknown function is an
evaluation error naming it, never a pass.
"""

import re
from typing import Any, Dict, List, Optional

from celpy import celtypes

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def dns1123_subdomain_errors(value: str) -> List[str]:
    """apimachinery validation.IsDNS1123Subdomain: at most 253 characters, dot-separated labels."""
    errors = []
    if len(value) > 253:
        errors.append("must be no more than 253 characters")
    if not DNS1123_SUBDOMAIN.match(value):
        errors.append("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                      "'.', and must start and end with an alphanumeric character")
    return errors


def dns1123_label_errors(value: str) -> List[str]:
    """validation.IsDNS1123Label: at most 63 characters."""
    errors = ["must be no more than 63 characters"] if len(value) > 63 else []
    if not DNS1123_LABEL.match(value):
        errors.append("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
                      "must start and end with an alphanumeric character")
    return errors


def dns1035_label_errors(value: str) -> List[str]:
    """validation.IsDNS1035Label: a 1123 label that starts with a letter."""
    errors = ["must be no more than 63 characters"] if len(value) > 63 else []
    if not DNS1035_LABEL.match(value):
        errors.append("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                      "alphabetic character, and end with an alphanumeric character")
    return errors


class CelOptional:
    """A cel-go optional: ``hasValue()``, ``value()``, ``orValue(default)``."""

    def __init__(self, value: Any = None, present: bool = False):
        self.present, self.content = present, value


class Format:
    """What ``format.<name>()`` returns: a named check with ``validate(value)``."""

    def __init__(self, name: str, check):
        self.name, self.check = name, check


_FORMATS = {"dns1123Subdomain": dns1123_subdomain_errors, "dns1123Label": dns1123_label_errors,
            "dns1035Label": dns1035_label_errors}


def _format(name: str):
    def make(_format_namespace: Any = None) -> Format:
        return Format(name, _FORMATS[name])
    return make


def _validate(fmt: Format, value: Any) -> CelOptional:
    if not isinstance(fmt, Format):
        raise TypeError(f"validate() is called on a format (format.dns1123Subdomain()...), not {type(fmt).__name__}")
    errors = fmt.check(str(value))
    return CelOptional(celtypes.ListType([celtypes.StringType(e) for e in errors]), present=bool(errors))


def _has_value(opt: CelOptional) -> celtypes.BoolType:
    return celtypes.BoolType(opt.present)


def _value(opt: CelOptional) -> Any:
    if not opt.present:
        raise ValueError("optional.none() dereference")
    return opt.content


def _or_value(opt: CelOptional, default: Any) -> Any:
    return opt.content if opt.present else default


def _split(text: celtypes.StringType, sep: celtypes.StringType, limit: Optional[int] = None) -> celtypes.ListType:
    """ext/strings.go split: ``limit`` -1 (all), 0 (none) or n pieces at most."""
    n = -1 if limit is None else int(limit)
    if n == 0:
        return celtypes.ListType([])
    parts = str(text).split(str(sep)) if n < 0 else str(text).split(str(sep), n - 1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def functions() -> Dict[str, Any]:
    """The functions to give celpy's ``Environment.program(ast, functions=...)``."""
    out: Dict[str, Any] = {name: _format(name) for name in _FORMATS}
    out.update(validate=_validate, hasValue=_has_value, value=_value, orValue=_or_value, split=_split)
    return out


FORMAT_NAMESPACE = celtypes.MapType({})  # the ``format`` identifier the rules call into
