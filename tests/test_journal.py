"""The sweep's journal when a write to it fails part way: a real partial write (the file
size limit, RLIMIT_FSIZE, takes the first bytes of a record and refuses the rest, as a
full disk does), in a child process so the limit stays there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nnsweep.sweep.journal import drop_torn_tail

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")

# Two trials told, a third told while the file may grow by 40 bytes only, then the limit
# lifted and two more told; prints the trials the journal holds, read afresh.
_CHILD = """
import resource, signal, sys
import optuna
from optuna.storages.journal import JournalFileBackend
from nnsweep.sweep.journal import WholeRecords
from pathlib import Path

path, backend = Path(sys.argv[1]), sys.argv[2]
optuna.logging.set_verbosity(optuna.logging.ERROR)

def storage():
    file = WholeRecords(path) if backend == "whole" else JournalFileBackend(str(path))
    return optuna.storages.JournalStorage(file)

def told(x):
    span = {"x": optuna.distributions.FloatDistribution(0, 9)}
    study.add_trial(optuna.trial.create_trial(params={"x": x}, distributions=span, value=x))

study = optuna.create_study(study_name="s", storage=storage())
for x in (1.0, 2.0):
    told(x)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size + 40, hard))
try:
    told(3.0)
except OSError as exc:
    print("refused", exc.errno, type(exc).__name__, exc, file=sys.stderr)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
for x in (4.0, 5.0):
    told(x)
fresh = optuna.load_study(study_name="s", storage=storage())
print(sorted(t.params["x"] for t in fresh.trials))
"""


def _run(tmp_path: Path, backend: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "optuna.journal"), backend],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_optuna_s_own_journal_is_unreadable_after_a_partial_write_and_a_next_one(tmp_path: Path) -> None:
    """The fault, on record: were Optuna to take a failed append back, WholeRecords could go."""
    done = _run(tmp_path, "optuna")
    assert "refused 27" in done.stderr  # EFBIG: the record did not fit
    assert done.returncode != 0 and "JSONDecodeError" in done.stderr  # the torn record and the next are one bad line


def test_a_partial_write_is_taken_back_and_the_journal_stays_readable(tmp_path: Path) -> None:
    done = _run(tmp_path, "whole")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused 27" in done.stderr  # EFBIG: the record did not fit
    assert done.stdout.strip() == "[1.0, 2.0, 4.0, 5.0]"  # the refused trial is not there, nothing else lost
    journal = tmp_path / "optuna.journal"
    assert f"SweepStateNotWritten cannot write the sweep's state at {journal}: File too large;" in done.stderr
    for line in (tmp_path / "optuna.journal").read_text().splitlines():
        json.loads(line)  # every line a whole record


@pytest.mark.parametrize(
    ("content", "kept"),
    [
        (b"", b""),
        (b'{"a":1}\n{"b":2}\n', b'{"a":1}\n{"b":2}\n'),
        (b'{"a":1}\n{"b":2}\n{"c":', b'{"a":1}\n{"b":2}\n'),
        (b'{"c":', b""),
        (b'{"a":1}\n' + b"x" * 200_000, b'{"a":1}\n'),  # a tail longer than one read back
    ],
)
def test_drop_torn_tail_keeps_the_whole_lines(tmp_path: Path, content: bytes, kept: bytes) -> None:
    path = tmp_path / "optuna.journal"
    path.write_bytes(content)
    assert drop_torn_tail(path) == len(content) - len(kept)
    assert path.read_bytes() == kept


def test_drop_torn_tail_of_no_journal_is_nothing(tmp_path: Path) -> None:
    assert drop_torn_tail(tmp_path / "none") == 0
    assert not (tmp_path / "none").exists()


def _journal_of_a_few_trials(path: Path) -> None:
    import optuna

    from nnsweep.sweep.journal import open_journal

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(study_name="s", storage=open_journal(path), directions=["maximize", "minimize"])
    span = {
        "x": optuna.distributions.FloatDistribution(0, 9),
        "r": optuna.distributions.CategoricalDistribution(["a", "b"]),
    }
    for x in (1.0, 2.0, 3.0):
        study.add_trial(optuna.trial.create_trial(params={"x": x, "r": "a"}, distributions=span, values=[x, -x]))
    study.set_user_attr("fingerprint", {"model": "m"})


@given(data=st.data())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_damaged_journal_opens_or_is_named_never_a_bare_error(tmp_path: Path, data: st.DataObject) -> None:
    """Bytes overwritten, cut out or added anywhere (a bad disk, an editor): the journal
    either opens (a torn last line is Optuna's to skip) or ends on SweepStateDamaged naming
    it, never Optuna's bare JSONDecodeError or KeyError."""
    from nnsweep.core.errors import SweepStateDamaged
    from nnsweep.sweep.journal import open_journal

    path = tmp_path / "optuna.journal"
    path.unlink(missing_ok=True)
    _journal_of_a_few_trials(path)
    whole = path.read_bytes()
    start = data.draw(st.integers(0, len(whole)))
    end = data.draw(st.integers(start, min(len(whole), start + 40)))
    inserted = data.draw(st.one_of(st.binary(max_size=20), st.sampled_from([b"", b"\n", b'"', b"{", b"}", b"0", b"x"])))
    path.write_bytes(whole[:start] + inserted + whole[end:])
    try:
        open_journal(path)
    except SweepStateDamaged as exc:
        assert str(path) in str(exc) and "\n" not in str(exc).strip()


@pytest.mark.parametrize(
    "line",
    [b'{"op_code":99,"worker_id":"w"}', b'{"worker_id":"w"}', b"[]"],
    ids=["unknown-operation", "no-operation", "not-an-object"],
)
def test_a_record_optuna_cannot_apply_is_named(tmp_path: Path, line: bytes) -> None:
    """Whole JSON lines Optuna cannot apply: an operation it does not know ended on its
    `AssertionError: Should not reach.` (found by the test above in a fresh clone's run)."""
    from nnsweep.core.errors import SweepStateDamaged
    from nnsweep.sweep.journal import open_journal

    path = tmp_path / "optuna.journal"
    _journal_of_a_few_trials(path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:2], line + b"\n", *lines[2:]]))
    with pytest.raises(SweepStateDamaged, match="a record Optuna cannot apply"):
        open_journal(path)
