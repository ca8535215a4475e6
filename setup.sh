#!/usr/bin/env bash
# Create .venv/ and install the project with its test extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
# A bare `torch` requirement would pull a multi-GB CUDA build; the CPU wheel of 2.13.0 satisfies
# the project's range, so install it first when no torch is importable.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    .venv/bin/python -m pip install --quiet torch==2.13.0
fi
# The rllib extra (Ray) lets the tests run a tiny multi-agent training, the tune extra (Optuna) a tiny
# hyperparameter search; the docs extra builds the documentation site. The editable install builds
# the compiled core (auction_gym._core) into the checkout when a C++ compiler is found; without one
# the simulator runs on its Python core (docs/design.md section 8).
.venv/bin/python -m pip install --quiet -e ".[dev,rllib,tune,docs]"
# The workloads' compiled draws run only with the numpy they were built against (an isolated build
# may have used another): say whether they run.
.venv/bin/python -c "import auction_gym.core as core, numpy as np; from auction_gym.workload.compiled import compiled_draws; \
print('auction_gym core:', core.active() + ';', 'workload draws:', 'compiled' if compiled_draws(np.random.default_rng()) else 'Python')"
