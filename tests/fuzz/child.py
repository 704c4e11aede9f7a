"""The fuzzer's child: imports meshflow once, then runs calls sent by fuzz.py.

Protocol (both directions: 4-byte big-endian length, then UTF-8 text):
parent -> child: the source of one call (empty: exit);
child -> parent: "ready" once, then per call "ok" or
"exc\0<class>\0<1 if documented class else 0>\0<message>".
A crash or hang is what the parent sees when no answer comes.
"""
import faulthandler
import os
import resource
import struct
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prelude import PRELUDE  # noqa: E402

GIB = 1 << 30


def main():
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # whatever meshflow or a call prints goes to the log, not into the protocol
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # thousands of crashes: no core files
    # AddressSanitizer needs its huge shadow mapping: no address-space limit
    # under it (its max_allocation_size_mb stands in, tools/test.sh).
    asan = "libasan" in os.environ.get("LD_PRELOAD", "")
    if os.environ.get("MESHFLOW_FUZZ_NO_RLIMIT") != "1" and not asan:
        limit = int(float(os.environ.get("MESHFLOW_FUZZ_RLIMIT_GB", "2")) * GIB)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    faulthandler.enable()  # the Python line of a crash lands in the log
    warnings.simplefilter("ignore")

    def send(text):
        data = text.encode("utf-8", "replace")
        out.write(struct.pack(">I", len(data)) + data)

    def recv():
        head = inp.read(4)
        if len(head) < 4:
            return None
        (n,) = struct.unpack(">I", head)
        return inp.read(n).decode("utf-8") if n else None

    if os.environ.get("MESHFLOW_FUZZ_TMP"):
        os.chdir(os.environ["MESHFLOW_FUZZ_TMP"])  # relative paths a call writes land there
    base = {"__name__": "__fuzz__"}
    exec(compile(PRELUDE, "<prelude>", "exec"), base)
    mf = base["mf"]
    # MemoryError: Python's own allocation failing under the address-space
    # limit (a list of 2**31 indices); meshflow's allocations raise
    # mf.OutOfMemoryError, a RuntimeError.
    documented = (mf.errors.Error, TypeError, ValueError, IndexError, RuntimeError, NotImplementedError, MemoryError)
    send("ready")
    while True:
        src = recv()
        if src is None:
            return
        ns = dict(base)  # a fresh namespace per call, as in a standalone reproducer
        try:
            exec(compile(src, "<call>", "exec"), ns)
            reply = "ok"
        except BaseException as e:  # noqa: B902 (SystemExit from a call is a finding too)
            try:
                msg = str(e)[:600]
            except BaseException:  # noqa: B902
                msg = "<str() of the exception raised>"
            cls = type(e)
            name = f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ != "builtins" else cls.__qualname__
            reply = f"exc\0{name}\0{int(isinstance(e, documented))}\0{msg}"
        del ns
        if mf.memory_reserved() > GIB // 2:  # the caching allocator must not hold the address space
            mf.empty_cache()
        send(reply)


if __name__ == "__main__":
    main()
