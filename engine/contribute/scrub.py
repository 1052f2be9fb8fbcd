"""Privacy scrubbing of everything a case package says: secrets and identifying names out, structure kept.

Each string that goes into a package passes through `Scrubber.text` (free text) or
`Scrubber.identifier` (a value that is an identifier as a whole, such as a run id). What is found is
replaced by ``<kind>-<10 hex>``, an HMAC-SHA256 of the value under a random per-package salt: the
same value gives the same token inside one package (so the case still hangs together) while
tokens cannot be linked across packages or reversed by guessing, because the salt is never written
anywhere. Private key blocks are dropped outright. Every replacement is counted in a report by kind
and place — never with the original value.

What is found, in this order:

- names the caller knows: values of identifying run.json fields (user, host, model, project, job,
  experiment ... names), the run id and run directory, ``--redact`` names, this machine's user and
  host name (generic account names such as ``root`` are left alone);
- private key blocks, credentials in URLs, bearer tokens, AWS access keys, Hugging Face / GitHub /
  Slack / OpenAI / Google API keys, JSON web tokens, ``password=…`` / ``token: …`` assignments;
- e-mail addresses, IPv4 and IPv6 addresses, absolute file paths (POSIX, ``~/``, Windows, UNC,
  ``file://``), internal host names (``*.internal``, ``*.local``, ``*.corp``, ...);
- long high-entropy strings (random keys of unknown format).

A URL (the ``--source`` link, or one inside free text) keeps only what is public: its query string and
fragment are dropped (``?token=…``), credentials removed, a host not on the public list of
``public_names.json`` replaced by a token (``host-<hex>.invalid``) with every segment of its path, and
on a public host every path segment scrubbed as text (a known user name in the path goes). A package
name in environment.json not on that file's list of public-index packages is replaced by a token
(`public_package`).
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import ipaddress
import json
import math
import re
import secrets
import socket
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

IDENTIFYING_FIELDS = {
    "user": ("user", "username", "user_name", "owner", "author", "login"),
    "host": ("host", "hostname", "host_name", "node", "nodes", "node_name", "master_addr", "master_address"),
    "name": ("model", "model_name", "model_id", "model_path", "project", "project_name", "experiment",
             "experiment_name", "job", "job_name", "job_id", "name", "run_name", "wandb_project", "wandb_entity",
             "wandb_run_name", "team", "org", "organization", "dataset", "dataset_name", "program", "tag", "tags"),
}
"""run.json keys (at any depth, case-insensitive) whose values are identifying names, by kind."""

GENERIC_ACCOUNTS = frozenset({"root", "admin", "user", "ubuntu", "debian", "runner", "nobody", "jovyan", "ec2-user",
                              "localhost", "ma-user", "hadoop", "www-data"})
"""Account and host names too generic to identify anyone; redacting them would garble ordinary words."""

_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY"
                          r"(?: BLOCK)?-----|\Z)", re.S)
_SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("credential", re.compile(r"://(?P<v>[^/\s:@]+:[^/\s@]+)@")),
    ("token", re.compile(r"(?i)\bbearer\s+(?P<v>[A-Za-z0-9._~+/=-]{8,})")),
    ("key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b")),
    ("token", re.compile(r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
                         r"|xox[abposr]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{20,}|AIza[0-9A-Za-z_-]{35})")),
    ("token", re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}")),
)
_ASSIGNMENT = re.compile(r"(?i)(?<![A-Za-z0-9])(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key"
                         r"|secret[_-]?key|auth|credentials?)(?![A-Za-z0-9_])\s*[:=]\s*[\"']?(?P<v>[^\s\"',;]+)")
_TOKEN = re.compile(r"[a-z]+(?:-[a-z]+)*-[0-9a-f]{10}")
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,24}(?![\w/:-]|\.\w)")
_IPV4 = re.compile(r"(?<![\d.])(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}(?!\d|\.\d)")
_IPV6_CANDIDATE = re.compile(r"(?<![0-9A-Za-z:.])[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(?:%[\w.]+)?"
                             r"(?![0-9A-Za-z:])")
_PATH = re.compile(r"(?:\bfile://[^\s\"'<>]*)|(?:\\\\[\w.$-]+\\[^\s\"'<>|]*)|(?:\b[A-Za-z]:\\[^\s\"'<>|]*)"
                   r"|(?:(?<![\w.~:/@-])(?:~|\.{1,2})?/[\w.@%+=~-]+(?:/[\w.@%+=~-]*)*)")
_HOST = re.compile(r"(?i)\b[a-z0-9](?:[a-z0-9-]{0,62}\.)+(?:internal|local|localdomain|lan|corp|intranet|intra|home"
                   r"|cluster|svc|priv|private)\b")
_LONG = re.compile(r"(?<![\w+/=-])[A-Za-z0-9+/=_-]{24,}(?![\w+/=-])")
_URL = re.compile(r"(?i)\bhttps?://[^\s\"'<>`]+")
PUBLIC_NAMES = Path(__file__).with_name("public_names.json")


@cache
def _public() -> dict[str, frozenset[str]]:
    data = json.loads(PUBLIC_NAMES.read_text(encoding="utf-8"))
    return {"packages": frozenset(data["packages"]), "hosts": frozenset(data["hosts"])}


def public_package(name: str) -> bool:
    """Whether a distribution name is on the list of public-index packages (PEP 503 normalised)."""
    return re.sub(r"[-_.]+", "-", name).lower() in _public()["packages"]


def public_host(host: str) -> bool:
    """Whether a host is a public site a case may link to (the list, or a subdomain of an entry)."""
    host = host.lower().rstrip(".")
    return any(host == h or host.endswith("." + h) for h in _public()["hosts"])


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def looks_random(text: str) -> bool:
    """Whether a long token looks like a random key: mixed letters and digits with high entropy."""
    classes = sum(bool(re.search(p, text)) for p in ("[a-z]", "[A-Z]", "[0-9]"))
    if re.fullmatch(r"[0-9a-fA-F]{32,}", text):
        return _entropy(text) >= 3.0
    return classes >= 3 and _entropy(text) >= 3.5


def _ipv6(candidate: str) -> bool:
    try:
        ipaddress.IPv6Address(candidate.split("%", 1)[0])
    except ValueError:
        return False
    return True


def local_identity() -> dict[str, set[str]]:
    """This machine's user name and host name (the values a package must not carry)."""
    out: dict[str, set[str]] = {"user": set(), "host": set()}
    try:
        out["user"].add(getpass.getuser())
    except (KeyError, OSError):
        pass
    try:
        out["host"].add(socket.gethostname())
    except OSError:
        pass
    return out


def identifying_values(meta: Mapping[str, Any]) -> dict[str, set[str]]:
    """Values of identifying fields (`IDENTIFYING_FIELDS`) anywhere in a run.json, by kind."""
    keys = {k: kind for kind, names in IDENTIFYING_FIELDS.items() for k in names}
    out: dict[str, set[str]] = {kind: set() for kind in IDENTIFYING_FIELDS}

    def visit(obj: Any, kind: str | None) -> None:
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                visit(v, keys.get(str(k).lower(), kind if isinstance(v, list) else None))
        elif isinstance(obj, list | tuple):
            for v in obj:
                visit(v, kind)
        elif kind and isinstance(obj, str | int) and str(obj).strip():
            out[kind].add(str(obj).strip())

    visit(meta, None)
    return out


class Scrubber:
    """Replaces secrets and identifying names in strings by salted tokens (see the module docstring).

    ``known`` maps a kind (``user``, ``host``, ``name``, ``path``, ``run-id``, ...) to values to
    redact wherever they appear. ``enabled=False`` passes everything through unchanged.
    """

    def __init__(self, known: Mapping[str, Iterable[str]] | None = None, *, enabled: bool = True,
                 salt: bytes | None = None):
        self.enabled = enabled
        self._salt = salt or secrets.token_bytes(32)
        self._found: Counter[tuple[str, str, str]] = Counter()
        terms: dict[str, str] = {}
        for kind, values in (known or {}).items():
            for v in values:
                v = str(v).strip()
                if len(v) >= 3 and v.lower() not in GENERIC_ACCOUNTS:
                    terms.setdefault(v, kind)
        self._terms = sorted(terms.items(), key=lambda kv: (-len(kv[0]), kv[0]))
        self._term_re = [(re.compile(r"(?<![A-Za-z0-9])" + re.escape(v) + r"(?![A-Za-z0-9])", re.I), kind)
                         for v, kind in self._terms]

    def token(self, kind: str, value: str) -> str:
        """``<kind>-<10 hex>``: the salted HMAC of ``value`` (stable within this scrubber only)."""
        digest = hmac.new(self._salt, f"{kind}\x00{value}".encode(), hashlib.sha256).hexdigest()
        return f"{kind}-{digest[:10]}"

    def _note(self, kind: str, where: str, action: str = "hashed") -> None:
        self._found[(kind, where, action)] += 1

    def _sub(self, pattern: re.Pattern[str], kind: str, text: str, where: str,
             accept: Callable[[str], bool] | None = None) -> str:
        group = "v" if "v" in pattern.groupindex else 0

        def repl(m: re.Match[str]) -> str:
            value = m.group(group)
            if _TOKEN.fullmatch(value) or (accept is not None and not accept(value)):
                return m.group(0)
            self._note(kind, where)
            start, end = m.start(group) - m.start(0), m.end(group) - m.start(0)
            whole = m.group(0)
            return whole[:start] + self.token(kind, value) + whole[end:]
        return pattern.sub(repl, text)

    def text(self, value: str, where: str, *, keep: Iterable[str] = ()) -> str:
        """Free text with every secret and identifying name replaced.

        Known names of the kinds in ``keep`` are left alone (the attribution names the contributor on
        purpose: ``keep=("user",)``); secrets, addresses, paths and e-mail addresses still go.
        """
        if not self.enabled or not value:
            return value
        out = _URL.sub(lambda m: self.url(m.group(), where, keep=keep), value)
        for pattern, kind in self._term_re:
            if kind not in keep:
                out = self._sub(pattern, kind, out, where)
        if _PRIVATE_KEY.search(out):
            self._note("private-key", where, "removed")
            out = _PRIVATE_KEY.sub("[private key removed]", out)
        out = self._sub(_ASSIGNMENT, "secret", out, where)
        for kind, pattern in _SECRET_PATTERNS:
            out = self._sub(pattern, kind, out, where)
        out = self._sub(_EMAIL, "email", out, where)
        out = self._sub(_IPV6_CANDIDATE, "ip", out, where, accept=_ipv6)
        out = self._sub(_IPV4, "ip", out, where)
        out = self._sub(_PATH, "path", out, where)
        out = self._sub(_HOST, "host", out, where)
        return self._sub(_LONG, "secret", out, where, accept=looks_random)

    def url(self, value: str, where: str, *, keep: Iterable[str] = ()) -> str:
        """A URL with only its public parts (see the module docstring); anything else is scrubbed as text."""
        if not self.enabled or not value:
            return value
        try:
            parts = urlsplit(value.strip())
            host = parts.hostname
        except ValueError:
            host = None
        if host is None or parts.scheme.lower() not in ("http", "https"):
            if _URL.fullmatch(value.strip()):  # looks like a link but does not parse: nothing of it is kept
                self._note("url", where)
                return self.token("url", value)
            return self.text(value, where, keep=keep)
        if parts.query or parts.fragment:
            self._note("query", where, "removed")
        if parts.username or parts.password:
            self._note("credential", where, "removed")
        if public_host(host):
            netloc = host + (f":{parts.port}" if parts.port else "")
        else:
            self._note("host", where)
            netloc = self.token("host", host.lower()) + ".invalid"
        if public_host(host):
            segments = [self._segment(seg, where, keep) for seg in parts.path.split("/")]
        else:  # nothing of a private server's path is of use to anyone else
            segments = [self.token("path", seg) if seg else seg for seg in parts.path.split("/")]
            if any(segments):
                self._note("path", where)
        return urlunsplit((parts.scheme.lower(), netloc, "/".join(segments), "", ""))

    def _segment(self, segment: str, where: str, keep: Iterable[str]) -> str:
        if segment.startswith("~") and len(segment) > 1:  # /~alice/: a user's home on the server
            self._note("user", where)
            return self.token("user", segment[1:])
        return self.text(segment, where, keep=keep) if segment else segment

    def package(self, name: str, where: str) -> str:
        """A package name as a package may carry it: itself when public (`public_package`), else a token."""
        if not self.enabled or public_package(name):
            return name
        self._note("package", where)
        return self.token("package", name)

    def identifier(self, value: str, kind: str, where: str) -> str:
        """A whole value that identifies something (a run id): always replaced by its token."""
        if not self.enabled:
            return value
        self._note(kind, where)
        return self.token(kind, value)

    def drop(self, kind: str, where: str) -> None:
        """Record that a field was left out of the package."""
        self._note(kind, where, "removed")

    def walk(self, obj: Any, where: str) -> Any:
        """``obj`` (JSON-like) with every string scrubbed, dictionary keys included."""
        if isinstance(obj, str):
            return self.text(obj, where)
        if isinstance(obj, Mapping):  # the report names the place, never a key (a key can be a value)
            return {self.text(str(k), f"{where} (key)"): self.walk(v, f"{where}.*") for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.walk(v, f"{where}[]") for v in obj]
        return obj

    def report(self) -> dict[str, Any]:
        """What was removed or hashed where (kinds, places and counts; never a value)."""
        items = [{"kind": k, "where": w, "action": a, "count": n} for (k, w, a), n in sorted(self._found.items())]
        by_kind: Counter[str] = Counter()
        for (k, _, _), n in self._found.items():
            by_kind[k] += n
        return {"privacy_safe": self.enabled, "salt_stored": False,
                "method": "HMAC-SHA256 with a random per-package salt that is not stored; tokens are "
                          "<kind>-<first 10 hex digits>",
                "by_kind": dict(sorted(by_kind.items())), "items": items}
