#!/usr/bin/env python3
"""A seeded random fuzzer of meshflow's public Python API.

    tests/fuzz/fuzz.py --calls 50000 --seed 1 --workers 2 --out build/fuzz
    tests/fuzz/fuzz.py --show 1234 --seed 1        # print the source of call 1234

Call i of a campaign is generated from random.Random(f"{seed}:{i}") alone, so
a seed reproduces a campaign exactly, whatever crashed before. Each call is
Python source (api.py, families.py) that a long-lived child process
(child.py) runs; the parent waits at most --timeout seconds for its answer.
A call fails when the child dies (a signal or an exit), hangs, or raises an
exception outside the documented classes (meshflow.errors.*, TypeError,
ValueError, IndexError, RuntimeError, NotImplementedError, and Python's own
MemoryError). For each distinct
(kind, function) the first failure is minimised (the call alone in a fresh
child, else delta debugging over the calls since the child started) and
written to <out>/<kind>_<function>.py as a standalone script.

Not failures, but reported: pybind11's binding-level TypeErrors ("incompatible
function arguments", "Unable to cast Python instance") per function, and
documented exceptions whose message names internals (<locals>, _C., _helpers).
"""
import argparse
import bisect
import collections
import json
import os
import random
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import api  # noqa: E402
import families  # noqa: E402
from generators import Gen  # noqa: E402
from prelude import PRELUDE  # noqa: E402

ADVERSARIAL_RATE = 0.3
WINDOW = 200  # calls kept since the child started, for minimisation
BINDING_MARKERS = ("Unable to cast Python instance", "incompatible function arguments")
INTERNAL_NAME = re.compile(r"<locals>|\b_C\.|(?:^|[\s'\"`(.])_[A-Za-z]\w*\(")
# Exceptions that mean the generator wrote bad Python, not that meshflow failed.
HARNESS_ERRORS = ("SyntaxError", "NameError", "UnboundLocalError", "IndentationError")


# --- generation -------------------------------------------------------------------------------


class Call:
    __slots__ = ("index", "name", "source")

    def __init__(self, index, name, source):
        self.index, self.name, self.source = index, name, source


def entries(only=None):
    """Every generator (op specs and families) with its weight, in a fixed order."""
    out = [(s, s.weight) for s in api.OPS] + [(f, f.weight) for f in families.FAMILIES]
    if only:
        pattern = re.compile(only)
        out = [(e, w) for e, w in out if any(pattern.search(n) for n in e.covered())]
        if not out:
            raise SystemExit(f"--only {only!r} matches no generator")
    return out


class Generator:
    def __init__(self, seed, only=None):
        self.seed = seed
        self.table = entries(only)
        self.cumulative = []
        total = 0.0
        for _, w in self.table:
            total += w
            self.cumulative.append(total)
        self.total = total

    def call(self, i):
        rng = random.Random(f"{self.seed}:{i}")
        adv = rng.random() < ADVERSARIAL_RATE
        entry = self.table[bisect.bisect_right(self.cumulative, rng.random() * self.total)][0]
        g = Gen(rng, adv)
        g.emit(f"mf.manual_seed({rng.randrange(2**31)})")
        name = entry.emit(g)
        g.emit("touch(r)")
        if g.grad and rng.random() < 0.4:
            g.emit("backward(r)")
        return Call(i, name, "\n".join(g.lines) + "\n")


# --- the child -----------------------------------------------------------------------------------


class Outcome:
    """ok | exc (cls, documented, message) | crash (signal or exit status) | hang."""

    __slots__ = ("kind", "cls", "documented", "message", "code", "log")

    def __init__(self, kind, cls="", documented=True, message="", code=0, log=""):
        self.kind, self.cls, self.documented, self.message, self.code, self.log = (
            kind, cls, documented, message, code, log)

    def failure_kind(self):
        """The failure's kind ("SIGSEGV", "HANG", "EXC_KeyError", ...) or None."""
        if self.kind == "crash":
            if self.code < 0:
                try:
                    return signal.Signals(-self.code).name
                except ValueError:
                    return f"SIG{-self.code}"
            return f"EXIT{self.code}"
        if self.kind == "hang":
            return "HANG"
        if self.kind == "exc" and not self.documented:
            return "EXC_" + self.cls.split(".")[-1]
        return None


class ChildError(RuntimeError):
    pass


class Child:
    """One child process; start() does not wait for its import to finish,
    so a spare can warm up while the current child works."""

    def __init__(self, env, logdir, tag):
        self.log_path = os.path.join(logdir, f"{tag}.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "child.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env, close_fds=True)
        self.ready = False
        self.buf = b""

    def _read(self, n, deadline):
        fd = self.proc.stdout.fileno()
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _message(self, timeout):
        deadline = time.monotonic() + timeout
        head = self._read(4, deadline)
        if head is None:
            return None
        body = self._read(struct.unpack(">I", head)[0], deadline)
        return None if body is None else body.decode("utf-8", "replace")

    def wait_ready(self, timeout=120):
        if self.ready:
            return
        try:
            msg = self._message(timeout)
        except EOFError:
            msg = None
        if msg != "ready":
            self.kill()
            raise ChildError(f"the child did not start: {self.log_tail()}")
        self.ready = True

    def run(self, source, timeout):
        self.wait_ready()
        data = source.encode()
        try:
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
            msg = self._message(timeout)
        except (EOFError, BrokenPipeError, OSError):
            return self._died()
        if msg is None:
            self.kill()
            return Outcome("hang", log=self.log_tail())
        if msg == "ok":
            return Outcome("ok")
        _, cls, documented, message = msg.split("\0", 3)
        return Outcome("exc", cls, documented == "1", message)

    def _died(self):
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        return Outcome("crash", code=code, log=self.log_tail())

    def log_tail(self, n=3000):
        try:
            self.log.flush()
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self):
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write(struct.pack(">I", 0))
                self.proc.stdin.flush()
                self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()
        self.log.close()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def start_child(env, logdir, tag, attempts=5):
    """A started child; retries while an import fails (the extension may be
    relinked under us by a rebuild)."""
    for attempt in range(attempts):
        child = Child(env, logdir, tag)
        try:
            child.wait_ready()
            return child
        except ChildError as e:
            child.close()
            if attempt == attempts - 1:
                raise
            print(f"fuzz: {e}; retrying", file=sys.stderr)
            time.sleep(3)


# --- results ---------------------------------------------------------------------------------------


class Results:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = 0
        self.restarts = 0
        self.exc_classes = collections.Counter()
        self.binding = collections.Counter()
        self.messages = {}  # (name, cls) -> [count, example message, call index]
        self.harness = {}  # (name, cls) -> [count, message, call index]
        self.failures = {}  # (kind, name) -> dict
        self.called = collections.Counter()
        self.minimize_time = 0.0

    def record(self, call, out):
        with self.lock:
            self.calls += 1
            self.called[call.name] += 1
            if out.kind != "exc":
                return
            short = out.cls.split(".")[-1]
            self.exc_classes[out.cls] += 1
            if short in HARNESS_ERRORS:
                entry = self.harness.setdefault((call.name, out.cls), [0, out.message, call.index])
                entry[0] += 1
            elif any(m in out.message for m in BINDING_MARKERS):
                self.binding[call.name] += 1
            elif out.documented and INTERNAL_NAME.search(out.message):
                entry = self.messages.setdefault((call.name, out.cls), [0, out.message[:200], call.index])
                entry[0] += 1


def is_failure(out):
    kind = out.failure_kind()
    if kind and out.kind == "exc" and out.cls.split(".")[-1] in HARNESS_ERRORS:
        return None  # a generator bug, reported on its own
    return kind


# --- minimisation ---------------------------------------------------------------------------------------


class Minimizer:
    def __init__(self, env, logdir, timeout, per_failure, budget):
        self.env, self.logdir, self.timeout = env, logdir, timeout
        self.per_failure, self.budget = per_failure, budget
        self.lock = threading.Lock()
        self.spent = 0.0
        self.n = 0

    def _replay(self, calls, kind, deadline):
        """Runs calls in a fresh child; True if the last one fails with kind."""
        if time.monotonic() > deadline:
            return False
        with self.lock:
            self.n += 1
            tag = f"min{self.n}"
        try:
            child = start_child(self.env, self.logdir, tag)
        except ChildError:
            return False
        try:
            for k, call in enumerate(calls):
                out = child.run(call.source, self.timeout)
                fk = out.failure_kind()
                if fk is not None:
                    return k == len(calls) - 1 and fk == kind
            return False
        finally:
            child.close()

    def minimize(self, window, failing, kind):
        """(calls, note): the shortest sequence found that ends in failing and fails with kind."""
        start = time.monotonic()
        with self.lock:
            left = self.budget - self.spent
        deadline = start + max(0.0, min(self.per_failure, left))
        try:
            if self._replay([failing], kind, deadline + self.timeout):
                return [failing], "reproduces alone in a fresh process"
            if not window or time.monotonic() > deadline:
                return window + [failing], "did NOT reproduce alone; not minimised (time budget)"
            if not self._replay(window + [failing], kind, deadline + self.timeout):
                return window + [failing], ("did NOT reproduce in a fresh process, alone or after the "
                                            f"{len(window)} calls since the child started (flaky or state-dependent)")
            prefix = self._ddmin(window, lambda p: self._replay(p + [failing], kind, deadline), deadline)
            complete = time.monotonic() <= deadline
            return prefix + [failing], (f"needs {len(prefix)} earlier call(s) (delta-debugged from {len(window)}"
                                        f"{'' if complete else ', stopped at the time limit'})")
        finally:
            with self.lock:
                self.spent += time.monotonic() - start

    @staticmethod
    def _ddmin(items, fails, deadline):
        n = 2
        while len(items) >= 2 and time.monotonic() < deadline:
            chunk = -(-len(items) // n)
            for i in range(0, len(items), chunk):
                rest = items[:i] + items[i + chunk:]
                if fails(rest):
                    items, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(len(items), 2 * n)
        if len(items) == 1 and time.monotonic() < deadline and fails([]):
            return []
        return items


def reproducer_text(seed, failing, kind, out, calls, note):
    detail = (f"exit status / signal {out.code}" if out.kind == "crash" else
              f"{out.cls}: {out.message[:300]}" if out.kind == "exc" else f"no answer within the timeout")
    lines = [
        "#!/usr/bin/env python3",
        f"# meshflow API fuzz reproducer: {kind} in {failing.name}",
        f"# seed {seed}, call {failing.index} (tests/fuzz/fuzz.py --seed {seed} --show {failing.index})",
        f"# failure: {kind}; {detail}".replace("\n", " "),
        f"# {note}",
        "# run: cd <repo> && PYTHONPATH=python /usr/bin/python3 " + "<this file>",
    ]
    if out.log.strip():
        lines.append("# the child's last output (stderr):")
        lines += ["#   " + line for line in out.log.strip().splitlines()[-40:]]
    lines += [
        "",
        PRELUDE,
        "",
        "def try_call(fn):",
        "    try:",
        "        fn()",
        "    except Exception as e:  # earlier calls may raise; only the last one matters",
        "        print(f'{fn.__name__}: {type(e).__name__}: {e}'[:200])",
        "",
    ]
    for call in calls[:-1]:
        body = "".join("    " + line + "\n" for line in call.source.splitlines())
        lines += [f"def call_{call.index}():  # {call.name}", body, f"try_call(call_{call.index})", ""]
    lines += [f"# --- call {failing.index}: {failing.name}", failing.source]
    return "\n".join(lines)


def one_line(call):
    body = [ln for ln in call.source.splitlines() if not ln.startswith(("mf.manual_seed", "touch(", "backward("))]
    text = "; ".join(body)
    if len(text) > 240:
        text = next((ln for ln in body if ln.startswith("r = ")), body[-1] if body else "")
    return text[:240]


def safe_name(text):
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", text)[:120]


# --- the campaign -----------------------------------------------------------------------------------------


class Campaign:
    def __init__(self, calls, seed, out, workers=1, timeout=10.0, only=None, verbose=False, minimize=True,
                 per_failure=60.0, budget=600.0, start=0):
        self.ncalls, self.seed, self.out, self.workers = calls, seed, out, max(1, workers)
        self.timeout, self.verbose, self.start = timeout, verbose, start
        self.gen = Generator(seed, only)
        self.results = Results()
        self.minimize = minimize
        self.tmp = tempfile.mkdtemp(prefix="mf_fuzz_")
        self.env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE", OPENBLAS_NUM_THREADS="1")
        self.env.setdefault("PYTHONPATH", os.path.join(ROOT, "python"))
        self.minimizer = Minimizer(dict(self.env, MESHFLOW_FUZZ_TMP=os.path.join(self.tmp, "min")), self.tmp,
                                   timeout, per_failure, budget)
        os.makedirs(os.path.join(self.tmp, "min"), exist_ok=True)
        self.stop = threading.Event()
        self.errors = []

    def _worker(self, w):
        env = dict(self.env, MESHFLOW_FUZZ_TMP=os.path.join(self.tmp, f"w{w}"))
        os.makedirs(env["MESHFLOW_FUZZ_TMP"], exist_ok=True)
        n = 0

        def spawn():
            nonlocal n
            n += 1
            return Child(env, self.tmp, f"w{w}_{n}")

        try:
            child, spare = start_child(env, self.tmp, f"w{w}_0"), spawn()
            window = collections.deque(maxlen=WINDOW)
            for i in range(self.start + w, self.start + self.ncalls, self.workers):
                if self.stop.is_set():
                    break
                call = self.gen.call(i)
                out = child.run(call.source, self.timeout)
                self.results.record(call, out)
                kind = is_failure(out)
                if out.kind in ("crash", "hang"):
                    child.close()
                    try:
                        spare.wait_ready()
                    except ChildError:
                        spare.close()
                        spare = start_child(env, self.tmp, f"w{w}_r{n}")
                    child, spare = spare, spawn()
                    with self.results.lock:
                        self.results.restarts += 1
                if kind:
                    self._failure(kind, call, out, list(window))
                window.append(call)
                if out.kind in ("crash", "hang"):
                    window.clear()
            child.close()
            spare.close()
        except Exception as e:  # noqa: BLE001 (a harness error must end the campaign visibly)
            self.errors.append(f"worker {w}: {type(e).__name__}: {e}")
            self.stop.set()

    def _failure(self, kind, call, out, window):
        key = (kind, call.name)
        with self.results.lock:
            entry = self.results.failures.get(key)
            first = entry is None
            if first:
                entry = self.results.failures[key] = {"count": 0, "first": call.index, "file": None, "note": "",
                                                      "line": one_line(call), "detail": out.message[:200] or
                                                      (f"signal/status {out.code}" if out.kind == "crash" else "")}
            entry["count"] += 1
        if self.verbose or first:
            print(f"fuzz: call {call.index} {call.name}: {kind}" + (" (new)" if first else ""), file=sys.stderr,
                  flush=True)
        if not first:
            return
        if self.minimize:
            calls, note = self.minimizer.minimize(window, call, kind)
        else:
            calls, note = [call], "not minimised (--no-minimize)"
        path = os.path.join(self.out, f"{safe_name(kind)}_{safe_name(call.name)}.py")
        with open(path, "w") as f:
            f.write(reproducer_text(self.seed, call, kind, out, calls, note))
        with self.results.lock:
            entry["file"], entry["note"] = path, note
            if len(calls) > 1:
                entry["line"] = f"({len(calls) - 1} earlier calls) " + one_line(call)

    def run(self):
        os.makedirs(self.out, exist_ok=True)
        t0 = time.monotonic()
        threads = [threading.Thread(target=self._worker, args=(w,), daemon=True) for w in range(self.workers)]
        for t in threads:
            t.start()
        last = t0
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=0.5)
            if time.monotonic() - last > 10:
                last = time.monotonic()
                r = self.results
                print(f"fuzz: {r.calls}/{self.ncalls} calls, {r.calls / (last - t0):.0f}/s, "
                      f"{sum(e['count'] for e in r.failures.values())} failures "
                      f"({len(r.failures)} distinct)", file=sys.stderr, flush=True)
        self.elapsed = time.monotonic() - t0
        shutil.rmtree(self.tmp, ignore_errors=True)
        return self

    # --- report -------------------------------------------------------------------------------------
    def summary(self):
        r = self.results
        rate = r.calls / self.elapsed if self.elapsed else 0.0
        lines = [f"meshflow API fuzz: seed {self.seed}, {r.calls} of {self.ncalls} calls, {self.workers} worker(s), "
                 f"{self.elapsed:.1f} s, {rate:.0f} calls/s",
                 f"child restarts: {r.restarts}; minimisation: {self.minimizer.spent:.0f} s"]
        for e in self.errors:
            lines.append(f"HARNESS ERROR: {e}")
        groups = collections.OrderedDict((k, [0, 0]) for k in
                                         ("SIGSEGV", "SIGFPE", "SIGABRT", "other signal", "exit", "hang",
                                          "undocumented exception"))
        for (kind, _), e in r.failures.items():
            g = (kind if kind in ("SIGSEGV", "SIGFPE", "SIGABRT") else "hang" if kind == "HANG" else
                 "exit" if kind.startswith("EXIT") else "undocumented exception" if kind.startswith("EXC_")
                 else "other signal")
            groups[g][0] += e["count"]
            groups[g][1] += 1
        lines.append("")
        lines.append("failures by kind:                calls  distinct")
        for g, (count, distinct) in groups.items():
            lines.append(f"  {g:<28} {count:>7} {distinct:>9}")
        lines.append(f"  {'total':<28} {sum(c for c, _ in groups.values()):>7} {len(r.failures):>9}")
        if r.failures:
            lines.append("")
            lines.append("distinct failures (kind, function, calls, first call, reproducer | call):")
            for (kind, name), e in sorted(r.failures.items()):
                path = os.path.relpath(e["file"], ROOT) if e["file"] else "-"
                lines.append(f"  {kind:<14} {name:<34} {e['count']:>5}  #{e['first']:<7} {path}")
                lines.append(f"      | {e['line']}")
                if e["note"] and not e["note"].startswith("reproduces alone"):
                    lines.append(f"      ({e['note']})")
        lines.append("")
        lines.append("exception classes raised (all, counts):")
        for cls, n in r.exc_classes.most_common():
            lines.append(f"  {cls:<48} {n:>7}")
        lines.append("")
        total = sum(r.binding.values())
        lines.append(f"binding-level errors (pybind11 TypeError: incompatible function arguments / "
                     f"unable to cast; not failures): {total} in {len(r.binding)} functions")
        for name, n in r.binding.most_common():
            lines.append(f"  {name:<48} {n:>7}")
        lines.append("")
        lines.append(f"documented exceptions whose message names internals (<locals>, _C., _helper(); "
                     f"not failures): {len(r.messages)}")
        for (name, cls), (n, msg, idx) in sorted(r.messages.items()):
            lines.append(f"  {name} {cls} x{n} (#{idx}): {msg!r}")
        if r.harness:
            lines.append("")
            lines.append("HARNESS: generated code that is not valid Python (generator bugs):")
            for (name, cls), (n, msg, idx) in sorted(r.harness.items()):
                lines.append(f"  {name} {cls} x{n} (#{idx}): {msg[:200]!r}")
        lines.append("")
        lines.append(f"functions called: {len(r.called)}")
        lines.append("  " + ", ".join(f"{k} {v}" for k, v in sorted(r.called.items())))
        return "\n".join(lines)

    def write_summary(self):
        text = self.summary()
        with open(os.path.join(self.out, "summary.txt"), "w") as f:
            f.write(text + "\n")
        r = self.results
        data = {"seed": self.seed, "calls": r.calls, "elapsed_s": self.elapsed, "workers": self.workers,
                "restarts": r.restarts, "harness_errors": self.errors,
                "failures": [{"kind": k, "function": n, **e} for (k, n), e in sorted(r.failures.items())],
                "exception_classes": dict(r.exc_classes), "binding_level": dict(r.binding),
                "internal_messages": [{"function": n, "class": c, "count": v[0], "message": v[1], "call": v[2]}
                                      for (n, c), v in sorted(r.messages.items())],
                "generator_bugs": [{"function": n, "class": c, "count": v[0], "message": v[1], "call": v[2]}
                                   for (n, c), v in sorted(r.harness.items())],
                "called": dict(r.called)}
        with open(os.path.join(self.out, "summary.json"), "w") as f:
            json.dump(data, f, indent=1)
        return text


def run_campaign(calls, seed, out, **kw):
    return Campaign(calls, seed, out, **kw).run()


# --- coverage --------------------------------------------------------------------------------------------


def documented_names():
    """(ops.md table names, nn_ops.md functional names, nn.md layer names)."""
    with open(os.path.join(ROOT, "docs", "ops.md")) as f:
        ops = re.findall(r"^\| `([^`]+)` \|", f.read(), re.M)
    with open(os.path.join(ROOT, "docs", "nn_ops.md")) as f:
        text = f.read()
    nn_ops = []
    for cell in re.findall(r"^\| src/ops/\S+ \| ([^|]+) \|", text, re.M):
        nn_ops += ["nn.functional." + n.strip() for n in cell.split(",")]
    with open(os.path.join(ROOT, "docs", "nn.md")) as f:
        text = f.read()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    # Capitalised code spans of the section are the layers (and `OrderedDict`, an argument of Sequential).
    layers = sorted({"nn." + n for n in re.findall(r"`([A-Z][A-Za-z0-9]+)`", section) if n != "OrderedDict"})
    return ops, nn_ops, layers


def covered_names():
    names = set()
    for entry, _ in entries():
        names.update(entry.covered())
    return names


def check_coverage():
    """Documented names without a generator (empty when every one has one)."""
    covered = covered_names()
    ops, nn_ops, layers = documented_names()
    return sorted({n for n in ops + nn_ops + layers if n not in covered})


# --- CLI ---------------------------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(ROOT, "build", "fuzz"))
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per call before it counts as a hang")
    p.add_argument("--only", help="regex: only generators covering a matching name (e.g. 'zeros|F.pad')")
    p.add_argument("--start", type=int, default=0, help="first call index")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--no-minimize", action="store_true")
    p.add_argument("--minimize-time", type=float, default=60.0, help="seconds per distinct failure")
    p.add_argument("--minimize-budget", type=float, default=900.0, help="seconds for all minimisation")
    p.add_argument("--show", type=int, metavar="I", help="print the source of call I and exit")
    p.add_argument("--check-coverage", action="store_true")
    args = p.parse_args(argv)
    if args.check_coverage:
        missing = check_coverage()
        print("every documented op has a generator" if not missing else "no generator: " + ", ".join(missing))
        return 1 if missing else 0
    if args.show is not None:
        call = Generator(args.seed, args.only).call(args.show)
        print(f"# call {call.index}: {call.name}\n{PRELUDE}\n{call.source}")
        return 0
    camp = Campaign(args.calls, args.seed, os.path.abspath(args.out), workers=args.workers, timeout=args.timeout,
                    only=args.only, verbose=args.verbose, minimize=not args.no_minimize,
                    per_failure=args.minimize_time, budget=args.minimize_budget, start=args.start).run()
    print(camp.write_summary())
    return 1 if camp.results.failures or camp.errors or camp.results.harness else 0


if __name__ == "__main__":
    sys.exit(main())
