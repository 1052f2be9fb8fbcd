"""Real small trainings used by the demo, the fault benchmark, tuning and case sandboxes (docs/faults.md).

``programs`` (every program by name behind one ``run``), ``classify`` (MLP/CNN on digits, blobs,
circles), ``moe`` (the tiny MoE LM and the seed scenario), ``distributed`` (gloo data parallel),
``faults`` (the fault catalogue and the benign look-alikes).
"""
