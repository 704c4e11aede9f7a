"""The API fuzzer's harness (tests/fuzz): every documented op has a
generator, generation is reproducible, and the harness itself detects and
reports crashes, hangs and undocumented exceptions with minimal reproducers.
The campaigns themselves run from tools/test.sh and tools/fuzz.sh."""
import os
import pathlib
import subprocess
import sys

import pytest

FUZZ = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fuzz"
sys.path.insert(0, str(FUZZ))

import fuzz  # noqa: E402


def test_every_documented_op_has_a_generator():
    assert fuzz.check_coverage() == []


def test_a_seed_reproduces_its_calls():
    a, b = fuzz.Generator(5), fuzz.Generator(5)
    assert [a.call(i).source for i in (0, 17, 999)] == [b.call(i).source for i in (0, 17, 999)]
    assert fuzz.Generator(6).call(17).source != a.call(17).source


def harness_env(**extra):
    """The environment of a child that signals itself on purpose: under the
    sanitizer run (tools/test.sh --sanitize) AddressSanitizer must leave
    SIGSEGV and SIGFPE to the process, as in an uninstrumented build."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **extra)
    if "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] += ":handle_segv=0:handle_sigfpe=0"
    return env


@pytest.fixture
def child(tmp_path):
    env = harness_env(OMP_NUM_THREADS="1", MESHFLOW_FUZZ_TMP=str(tmp_path))
    c = fuzz.start_child(env, str(tmp_path), "test")
    yield c
    c.close()


def test_the_child_reports_each_kind_of_outcome(child):
    assert child.run("r = mf.ones(2) + 1\ntouch(r)\n", 10).kind == "ok"
    out = child.run("mf.ones(2).view(5)\n", 10)
    assert out.kind == "exc" and out.documented and out.failure_kind() is None
    out = child.run("raise KeyError('x')\n", 10)
    assert out.failure_kind() == "EXC_KeyError"
    out = child.run("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", 10)
    assert out.kind == "crash" and out.failure_kind() == "SIGSEGV"


def test_a_call_past_the_timeout_is_a_hang(child):
    out = child.run("import time\ntime.sleep(30)\n", 1.0)
    assert out.failure_kind() == "HANG"


def test_a_campaign_writes_a_minimal_reproducer(tmp_path, monkeypatch):
    """A generator whose call 3 crashes: the campaign records it, restarts
    the child, minimises the failure to the call alone and writes a script
    that reproduces it."""
    def call(self, i):
        src = "import os, signal\nos.kill(os.getpid(), signal.SIGFPE)\n" if i == 3 else "r = mf.ones(3)\n"
        return fuzz.Call(i, "crasher" if i == 3 else "ok", src)

    monkeypatch.setattr(fuzz.Generator, "call", call)
    for key, value in harness_env().items():
        monkeypatch.setenv(key, value)
    camp = fuzz.Campaign(8, 0, str(tmp_path), workers=1, timeout=10).run()
    failures = camp.results.failures
    assert list(failures) == [("SIGFPE", "crasher")]
    entry = failures[("SIGFPE", "crasher")]
    assert entry["note"] == "reproduces alone in a fresh process" and camp.results.calls == 8
    script = pathlib.Path(entry["file"])
    env = harness_env()
    assert subprocess.run([sys.executable, str(script)], env=env, capture_output=True).returncode == -8
    assert "SIGFPE" in camp.summary()


def test_a_short_campaign_is_clean(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
    camp = fuzz.Campaign(400, 11, str(tmp_path), workers=1, timeout=10).run()
    assert not camp.errors and not camp.results.harness, camp.summary()
    assert not camp.results.failures, camp.summary()
