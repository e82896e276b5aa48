#!/bin/bash
# One device call of the decoupling study's eta-4 arms (configs/studies/decoupling.py; ARMS picks them), for the
# seeds in SEEDS, PARALLEL runs sharing the GPU; what comes back is every run's directory without
# its checkpoints, as $OUT/<arms>_<seeds>.tar.gz, and the runner's log. A run the call's time cuts
# checkpoints on SIGTERM, and the same call again on the still-warm machine resumes it.
#   SEEDS=0,1 PARALLEL=4 bash benchmarks/results/rl-gpu/decoupling/device_eta4.sh
set -u
SEEDS=${SEEDS:-0,1}; ARMS=${ARMS:-decoupled_eta4,coupled_eta4}; PARALLEL=${PARALLEL:-4}; LIMIT=${LIMIT:-545}
export PYTHONPATH=$PWD/.whl/site:$PWD PYTHONUNBUFFERED=1
R=runs/st/decoupling; mkdir -p $R $OUT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
git rev-parse HEAD 2>/dev/null || true
timeout -s TERM $LIMIT python3 -m asyncwebrl.studies run configs/studies/decoupling.py --out $R \
  --parallel $PARALLEL --seeds $SEEDS --arms $ARMS 2>&1 | tee $OUT/runner_${ARMS//,/_}_${SEEDS//,/}.log
tar --exclude='checkpoints' --exclude='*.ckpt' -czf $OUT/${ARMS//,/_}_${SEEDS//,/}.tar.gz $R
for f in $R/*/seed*/summary.json; do python3 -c "import json; s=json.load(open(\"$f\")); print(\"$f\", s[\"success_before\"], s[\"success_after\"], s[\"episodes\"])"; done
