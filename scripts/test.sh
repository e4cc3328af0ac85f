#!/usr/bin/env bash
# Install everything the test suite needs, then run the whole suite once.
# Used verbatim by the README and by .ci/run. Safe to rerun: each step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
python -m pip install --quiet -e '.[test]'

# The browser tests drive Debian's Chromium with Playwright; never a downloaded browser.
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
    || echo "warning: could not install chromium; browser tests will be skipped" >&2
fi

# The sandbox tests and the code/terminal environments run real bubblewrap sandboxes (prlimit
# and setpriv come from util-linux); without it those tests are skipped, saying why.
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap util-linux >/dev/null) \
    || echo "warning: could not install bubblewrap; sandbox tests will be skipped" >&2
fi

# The Phoenix integration test and the Ray placement test need optional extras; they are
# large, so a failed install only skips those tests (and says so) instead of failing the suite.
for extra in phoenix ray; do
  python -m pip install --quiet -e ".[$extra]" >/dev/null 2>&1 \
    || echo "warning: could not install the '$extra' extra; its tests will be skipped" >&2
done

python -m ruff check src tests bench
python -m ruff format --check src tests bench
python -m mypy
python -m pytest -q -p no:cacheprovider "$@"
