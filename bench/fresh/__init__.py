"""Fresh benchmark programs written independently of the diagnoser, with injected user mistakes."""
