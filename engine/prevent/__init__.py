"""Prevent: a pre-launch configuration linter whose rules live in the knowledge graph (docs/lint.md).

Readers turn Megatron-LM launch scripts and YAML, DeepSpeed JSON, Hugging Face TrainingArguments and our
own YAML into config graphs with derived values; prevention rules (SPARQL conditions stored as
``dt:PreventionRule``) run over them; confirmed causes whose remedy is a config change become new rules.
"""

from debugtune.engine.prevent.document import ConfigDoc, KeyIssue
from debugtune.engine.prevent.errors import LintError, LintInputError
from debugtune.engine.prevent.keys import KeyRegistry, KeySpec
from debugtune.engine.prevent.lint import Linter, LintResult, OffendingKey, Violation
from debugtune.engine.prevent.rules import DerivationRule, PreventionRule, load_derivations, load_rules

__all__ = [
    "ConfigDoc", "DerivationRule", "KeyIssue", "KeyRegistry", "KeySpec", "LintError", "LintInputError", "LintResult",
    "Linter", "OffendingKey", "PreventionRule", "Violation", "load_derivations", "load_rules",
]
