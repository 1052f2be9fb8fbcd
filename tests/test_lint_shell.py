"""The launch-script reader gives the argument vector bash gives: every construct launch scripts use, run
through the reader and through ``bash`` itself (the training command replaced by a function that prints its
arguments), and the MODEL_ARGS values of Megatron-LM's CI through the shell steps its runner applies."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from debugtune.engine.prevent.readers.megatron import ci_argument
from debugtune.engine.prevent.readers.shell import Shell

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")

# (construct, script): every variable a script reads is set in it, so bash and the reader agree on its value.
CASES = [
    ("array unquoted splits its elements", 'ARGS=(--lr 1e-4 "--split 99,1,0")\npython train.py ${ARGS[@]}'),
    ("array quoted keeps its elements", 'ARGS=(--lr 1e-4 "--split 99,1,0")\npython train.py "${ARGS[@]}"'),
    ("array star joined", 'A=(a "b c")\npython train.py "${A[*]}" ${A[*]}'),
    ("array glued to text", 'A=(x y)\npython train.py "--v=${A[@]}" --w=${A[@]}end'),
    ("array elements and length", 'A=(p q r)\npython train.py ${A[0]} "${A[2]}" ${A[-1]} ${#A[@]}'),
    ("array append", 'A=(--a 1)\nA+=(--b "2 3")\nS=x\nS+=" y"\npython train.py "${A[@]}" $S'),
    ("multi-line array with comments", 'A=(\n  --a 1   # first\n  --b 2\n)\npython train.py ${A[@]}'),
    ("empty array quoted", 'A=()\npython train.py "${A[@]}" --x'),
    ("default with quoted default", 'python train.py --nnodes ${NNODES:-"1"} "${NNODES:-"1"}"'),
    ("default with single-quoted default", "python train.py ${X:-'a b'} ${X:-a b} \"${X:-a b}\""),
    ("default of a set variable", 'X=4\nE=\npython train.py ${X:-1} ${E:-2} ${E-3} ${X:+--on} ${U:+--off}'),
    ("assign default", 'X=${Y:=5}\npython train.py $X $Y'),
    ("nested default", 'B=7\npython train.py ${A:-${B:-3}} ${A:-"${B} 8"}'),
    ("arithmetic", 'N=2\nG=8\npython train.py $((N*G)) $(( G / 3 )) $((-7/2)) $(($N+1)) $(( (N+G)%3 ))'),
    ("arithmetic in an assignment", 'NODES=2\nGPUS=8\nWORLD=$((NODES * GPUS))\npython train.py --w $WORLD'),
    ("here-string into an array", 'read -r -a A <<< "--lr 1e-4 --bf16"\npython train.py "${A[@]}"'),
    ("here-string into names", 'read -r X Y <<< "a b c"\npython train.py "$X" "$Y"'),
    ("here-string with IFS", 'IFS=, read -r -a B <<< "1,2,3"\npython train.py "${B[@]}"'),
    ("here-document into a variable", "read -r -d '' S <<'EOF'\n--x 1\n--y 2\nEOF\npython train.py $S"),
    ("expanded here-document", "T=4\nread -r -d '' S <<EOF\n--tp $T\nEOF\npython train.py $S"),
    ("mapfile from a here-string", 'mapfile -t L <<< "a b\nc"\npython train.py "${L[@]}"'),
    ("line continuations", 'python train.py \\\n    --a 1 \\\n    --b 2'),
    ("export and declare",
     'export TP=2 PP=4\ndeclare -a R=(--r 1)\nlocal_x=3\npython train.py --tp $TP --pp $PP "${R[@]}"'),
    ("string of options unquoted", 'OPTS="--bf16 --lr 3e-4"\npython train.py $OPTS "$OPTS"'),
    ("quotes and escapes", "python train.py a\\ b \"c\\\"d\" 'e\\f' $'g\\th' \"\" --z"),
    ("empty expansion vanishes", 'E=\npython train.py $E "$E" --x'),
    ("parameter operators", 'P=/a/b/c.txt\npython train.py ${P%/*} ${P##*/} ${P/b/B} ${P:1:3} ${P^^} ${#P} ${P%.*}'),
    ("eval of an argument string", 'S=\'--a "b c"\'\neval "python train.py $S"'),
    ("eval building an array", 'S=\'--a "b c" --d 1\'\neval "ARR=($S)"\npython train.py "${ARR[@]}"'),
    ("statements on one line", 'X=1; Y=2   # comment\npython train.py $X$Y && echo done'),
    ("pipe and redirections", 'python train.py --a 1 2>&1 | tee log.txt'),
    ("if with a defaulted test", 'D=${4:-"MOCK"}\nif [[ "$D" == "MOCK" ]] || [[ -z "$T" ]]; then\n  A=(--mock-data)\n'
                                 'else\n  A=(--data-path x)\nfi\npython train.py ${A[@]}'),
    ("if elif else", 'X=1\nif [ "$X" = 2 ]; then Y=a; elif [ "$X" -eq 1 ]; then Y=b; else Y=c; fi\npython train.py $Y'),
    ("nested if", 'X=1\nif [ $X -eq 1 ]; then\n  if [ $X -eq 2 ]; then Y=in; else Y=out; fi\nfi\npython train.py $Y'),
    ("launcher before the script", 'G=8\nDIST="--nproc_per_node $G --nnodes 1"\ntorchrun $DIST train.py --x 1'),
]


def _reader_argv(script: str) -> list[str]:
    commands = Shell("<test>").run(script)
    cmd = [c for c in commands if any(w.text.endswith(".py") for w in c.words)][-1]
    at = next(i for i, w in enumerate(cmd.words) if w.text.endswith(".py"))
    return [w.text for w in cmd.words[at + 1:]]


def _bash(script: str, tmp_path) -> list[str]:
    prelude = ('python() { shift; printf "%s\\0" "$@"; }\n'
               'torchrun() { while [ "$1" != "train.py" ]; do shift; done; shift; printf "%s\\0" "$@"; }\n')
    out = subprocess.run([BASH, "--norc", "--noprofile", "-c", prelude + script], capture_output=True,
                         cwd=tmp_path, timeout=10, check=False)
    return out.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize(("construct", "script"), CASES, ids=[c for c, _ in CASES])
def test_reader_argv_is_bash_argv(construct, script, tmp_path):
    assert _reader_argv(script) == _bash(script, tmp_path), construct


# MODEL_ARGS values as they occur in Megatron-LM's tests/functional_tests/test_cases/*/model_config.yaml.
CI_VALUES = [
    ("--moe-layer-freq", "([0]*3+[1]*11)"),
    ("--pipeline-model-parallel-layout", "Et*2|(tt|)*5t|tmL"),
    ("--hybrid-layer-pattern", "M-M-M-M*-M-|M-M-M*-M-M-"),
    ("--recompute-modules", "[layernorm mla_up_proj mlp moe_act]"),
    ("--recompute-modules", "[moe_act]"),
    ("--spec", "megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec"),
    ("--step-batch-size-schedule", "0:384 200B:768 400B:1152"),
    ("--split", "949,50,1"),
    ("--stop-words", '"the"'),
    ("--lr", 1e-06),
    ("--num-layers", 14),
    ("--bf16", True),
    ("--data-path", "  padded   value  "),
]


def _ci_bash(option: str, value: str, tmp_path) -> list[str]:
    """The runner's steps in bash: trim and unquote with xargs, classify the value, then ``eval`` the array."""
    script = r'''
key="$1"; value="$(echo "$2" | xargs)"
if [[ "$value" == "true" ]]; then s="$key"
elif echo "$value" | grep -Eq '^\([^)]+\)$'; then s="$key \"$value\""
elif echo "$value" | grep -Eq '^\[[^]]+\]$'; then s="$key $(echo "$value" | sed 's/^\[//;s/\]$//')"
elif [[ "$value" == *" "* || "$value" == *"|"* || "$value" == *"("* || "$value" == *")"* ]]; then s="$key \"$value\""
else s="$key $value"; fi
eval "A=($s)"; printf "%s\0" "${A[@]}"
'''
    out = subprocess.run([BASH, "--norc", "--noprofile", "-c", script, "ci", option, value], capture_output=True,
                         cwd=tmp_path, timeout=10, check=False)
    return out.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize(("option", "value"), CI_VALUES, ids=[f"{o}={v}" for o, v in CI_VALUES])
def test_model_args_reach_the_parser_as_megatron_ci_passes_them(option, value, tmp_path):
    shown = "true" if value is True else str(value)
    ours = [w.text for w in Shell("<test>").words(ci_argument(option, value), 1)]
    assert ours == _ci_bash(option, shown, tmp_path)
