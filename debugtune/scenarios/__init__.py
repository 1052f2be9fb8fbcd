"""Real small trainings used by the demo, the fault benchmark, tuning and case sandboxes."""
