#!/bin/bash
# The device check on a lent GPU machine (its Python 3.12 image has torch, pytorch-lightning and opencv, not
# hydra-core, omegaconf, pydantic, gymnasium, ale-py or wandb). Prepare the wheels on a machine with internet:
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .wheels \
#       hydra-core omegaconf pydantic gymnasium ale-py wandb
# carry .wheels with the working tree, then run from the repository root:
#   bash ga3c/tools/device_check.sh [overrides...]         # results in $OUT (or outputs/device_check)
set -euo pipefail
if ! python -c "import hydra, gymnasium, ale_py, wandb, pydantic" 2>/dev/null; then
    pip install --quiet --no-index --find-links .wheels hydra-core omegaconf pydantic gymnasium ale-py wandb
fi
pip install --quiet --no-deps --no-build-isolation -e . 2>/dev/null || export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec python -m ga3c.tools.device_check "hydra.run.dir=${OUT:-outputs/device_check}" wandb.mode=disabled "$@"
