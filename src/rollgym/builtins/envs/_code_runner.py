"""The test runner the ``code`` environment copies into a sandbox as ``_runner.py``.

It reads ``{"nonce": str, "tests": [expression, ...]}`` from stdin before the solution is
loaded, runs ``solution.py`` in a fresh namespace, then evaluates each test expression there
and prints ``<nonce> PASS <i>`` or ``<nonce> FAIL <i> <reason>`` as it goes, flushing each
line, so a test that hangs or kills the process still leaves the earlier verdicts. The
nonce keeps a solution's own prints from counting as verdicts. Tests may call
``raises(callable, ExceptionType)``, True when the call raises that exception.
"""

RUNNER = r"""
import json, sys
spec = json.loads(sys.stdin.read())
nonce, tests = spec["nonce"], spec["tests"]
del spec
namespace = {"__name__": "solution"}
try:
    with open("solution.py") as handle:
        exec(compile(handle.read(), "solution.py", "exec"), namespace)
except BaseException as exc:
    print(nonce, "LOADFAIL", type(exc).__name__, flush=True)
    raise SystemExit(1)
def raises(call, kind):
    try:
        call()
    except kind:
        return True
    except BaseException:
        return False
    return False
namespace["raises"] = raises
for index, test in enumerate(tests):
    try:
        ok = eval(test, namespace) is True
        reason = "" if ok else "assertion is false"
    except BaseException as exc:
        ok, reason = False, type(exc).__name__
    print(nonce, "PASS" if ok else "FAIL", index, reason, flush=True)
"""
