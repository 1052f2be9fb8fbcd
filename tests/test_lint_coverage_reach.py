"""bench/lint_coverage.py's start-up set: which functions a constructor reaches, which locals carry a key, and
which checks leave the denominator (and why)."""

from __future__ import annotations

import ast

from bench import lint_coverage as lc

_SOURCE = '''
class Base:
    def __init__(self, cfg):
        assert cfg.size > 0, "base check"

class Engine(Base):
    def __init__(self, cfg):
        super().__init__(cfg)
        self._configure()
        helper(cfg)

    def _configure(self):
        size = self.autotp_size()
        if size not in (0, 1):
            raise AssertionError("autotp with stage 3")
        assert self.grad.data_ptr() % 2 == 0

    def step(self):
        assert self.zero_stage() < 2, "runtime only, never reached from __init__"

def helper(cfg):
    if cfg.bad:
        raise ValueError("module function")
'''


def test_reach_follows_self_super_and_module_calls_but_not_unreached_methods():
    names = [n for n, _ in lc._reachable(ast.parse(_SOURCE), ["Engine.__init__"])]
    assert set(names) == {"Engine.__init__", "Base.__init__", "Engine._configure", "helper"}


def test_a_local_assigned_from_the_configuration_counts_as_its_key():
    fn = dict(lc._reachable(ast.parse(_SOURCE), ["Engine.__init__"]))["Engine._configure"]
    assert lc._local_keys(fn, "self", set()) == {"size": ("autotp_size",)}


def test_runtime_state_leaves_the_start_up_denominator_with_its_reason():
    state = lc._classified(lc.Check("deepspeed", "x.py", "f", 1, "assert", ("grad",),
                                    ("self.grad.data_ptr() % 2 == 0",), scope="startup"))
    config = lc._classified(lc.Check("deepspeed", "x.py", "f", 2, "raise", ("autotp_size",),
                                     ("size not in (0, 1)",), scope="startup"))
    assert not state.config_only and "run time" in state.why_not
    assert config.config_only and not config.why_not


def test_check_ids_keep_the_folder_of_a_file_whose_name_is_taken():
    check = lc.Check("deepspeed", "deepspeed/runtime/pipe/engine.py", "PipelineEngine.__init__", 76, "assert", (), ())
    assert check.id == "deepspeed:pipe/engine.py:76"
    other = lc.Check("deepspeed", "deepspeed/runtime/engine.py", "f", 76, "assert", (), ())
    assert other.id == "deepspeed:engine.py:76"
