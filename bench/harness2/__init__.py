"""A second fault-bench harness, written without ``debugtune.scenarios``: its own programs, training loops,
injections and logging, in the styles users write — a plain PyTorch loop logging only its loss
(:mod:`.plain`), the Hugging Face ``Trainer`` with debugtune's callback (:mod:`.trainer`), a Lightning module with
the callback (:mod:`.lightning`), and programs that log to JSON lines or TensorBoard and are imported rather than
attached (:mod:`.imported`). Healthy programs whose loss is not a supervised loss (GAN, policy gradient,
contrastive, full-batch graph, skip-gram) are families here too.

``python -m bench.harness2`` trains its catalogue (:mod:`.catalogue`) into ``bench/harness2/out`` in the layout
``bench.faults`` reads for leave-one-harness-out scoring (``labels/*.json``, ``runs/<id>``, ``results.json``).
"""
