"""Framework integrations at the front door: the live probe as callbacks of trainers the user does not own.

- ``debugtune.integrations.hf.DebugtuneCallback``: a Hugging Face ``transformers.TrainerCallback`` (extra ``hf``);
- ``debugtune.integrations.lightning.DebugtuneCallback``: a Lightning ``Callback`` (extra ``lightning``).

Both share :class:`~debugtune.integrations.session.ProbeSession` (attach, log, close, diagnose); importing this
package imports neither framework. See docs/integrations.md.
"""
