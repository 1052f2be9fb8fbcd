"""Readers of launch configurations: Megatron-LM launch scripts, argument lists and YAML, DeepSpeed JSON,
Hugging Face TrainingArguments, and our own YAML (see ``dispatch.read_config``)."""
