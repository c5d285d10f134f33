#!/bin/bash
# The device check on a lent GPU machine. Its Python 3.12 image has torch, pytorch-lightning, numpy and opencv,
# not hydra-core, omegaconf, pydantic, gymnasium or ale-py (wandb and matplotlib are optional: the check runs
# with wandb.mode=disabled and writes its tables without charts).
#   bash ga3c/tools/device_check.sh --prepare     # here, with internet: the wheels into .wheels/ (~15 MB)
#   bash ga3c/tools/device_check.sh [overrides]   # there, from the repository root, .wheels carried: results in $OUT
set -euo pipefail
PACKAGES=("hydra-core==1.3.*" "omegaconf==2.3.*" pydantic gymnasium ale-py)
if [[ "${1:-}" == "--prepare" ]]; then
    mkdir -p .wheels
    # hydra's parser runtime exists only as a source archive: build its (pure-Python) wheel, so the download
    # below resolves hydra-core 1.3 instead of falling back to an ancient release that has no such dependency
    pip wheel --quiet --no-deps "antlr4-python3-runtime==4.9.3" -w .wheels
    pip download --quiet --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
        --find-links .wheels -d .wheels "${PACKAGES[@]}"
    rm -f .wheels/numpy-*.whl      # the image has numpy (and a second copy would not fit what a run carries)
    du -sh .wheels
    exit 0
fi
if ! python -c "import hydra, gymnasium, ale_py, pydantic" 2>/dev/null; then
    pip install --quiet --no-index --find-links .wheels "${PACKAGES[@]}"
fi
pip install --quiet --no-deps --no-build-isolation -e . 2>/dev/null || export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec python -m ga3c.tools.device_check "hydra.run.dir=${OUT:-outputs/device_check}" wandb.mode=disabled "$@"
