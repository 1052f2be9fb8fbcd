"""What a reader makes of one configuration file, before its keys are checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ISSUE_KINDS = ("unknown", "invalid-value", "invalid-choice", "not-in-version", "removed", "removed-later", "duplicate")


@dataclass(frozen=True)
class KeyIssue:
    """A problem with one key: unknown, a value of the wrong type, not a choice, outside the version, duplicated."""

    kind: str
    key: str
    raw: str = ""
    expected: str = ""
    closest: str = ""
    line: int | None = None


@dataclass
class ConfigDoc:
    """One configuration as read: settings by key (raw words or typed values), environment, positions.

    ``settings`` holds each key once; a command-line reader has already mapped options to keys, a
    structured reader (YAML, JSON) keeps the names as written (nested sections flattened with ".").
    """

    path: str
    framework: str
    source_kind: str
    settings: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    version: str | None = None
    issues: list[KeyIssue] = field(default_factory=list)
    unresolved: dict[str, str] = field(default_factory=dict)
    """Keys whose value holds a shell expansion that could not be resolved (value → as written)."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Entries the reader did not read as settings, with why (a NeMo-style key in MODEL_ARGS)."""
    hidden_args: list[str] = field(default_factory=list)
    """Words of the argument list that expand to arguments this file does not show (``${EXTRA_ARGS}``,
    ``"$@"``): a rule that relies on a key they could set is not judged."""
    options: dict[str, str] = field(default_factory=dict)
    """The command-line option each key was given with (key → ``--norm-epsilon``)."""
    entry_point: str | None = None
    """The training script a launch command runs (``pretrain_gpt.py``), when there is one."""
    ci_model_args: bool = False
    """Read from a Megatron CI ``MODEL_ARGS`` mapping (how its values become words depends on the release)."""
    version_inferred: bool = False
    """``version`` is the newest release the keys fit, not one the user named or the file pins."""
    notes: list[str] = field(default_factory=list)
    """What the reader decided that the user should know (the release it inferred, ...)."""
    mode: str | None = None
    """``training`` or ``inference`` when the file says so (Megatron CI's ``MODE:``)."""

    def set(self, key: str, value: Any, line: int | None) -> None:
        self.settings[key] = value
        if line is not None:
            self.lines.setdefault(key, line)

    def overlay(self, other: ConfigDoc) -> None:
        """Take ``other``'s settings, positions, environment and issues over this document's."""
        for key, value in other.settings.items():
            self.settings[key] = value
            self.unresolved.pop(key, None)
            if key in other.lines:
                self.lines[key] = other.lines[key]
        self.unresolved.update(other.unresolved)
        self.env.update(other.env)
        self.issues += other.issues
