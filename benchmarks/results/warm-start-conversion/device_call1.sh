#!/bin/bash
# One H200/H100 call: stage 4's conversion (stage 3 -> clicks by label) re-run with checkpoints
# saved early, each judged greedy and at temperature 1 (8 samples) on the default's 60 `unseen`
# tasks (seed 0), browser-free. Which partly converted checkpoint leaves RL a decision to learn?
# MINUTES, SAVE (checkpoint steps judged) and KEEP (checkpoints brought back) pick the sweep;
# device_call2.sh is this script with 3 minutes and later checkpoints.
set -u
MINUTES=${MINUTES:-1.1}; SAVE=${SAVE:-"30 60 100 150 220 320"}; KEEP=${KEEP:-"60 100 150 220"}
export SAVE
export PYTHONPATH=$PWD/.whl/site:$PWD
R=runs/wsc; mkdir -p $R $OUT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 benchmarks/warm_start.py --init assets/warm_start_ids --interaction labels --first-seed 300000 \
  --minutes $MINUTES --steps 4100 --warmup-steps 50 --learning-rate 4e-4 --workers 14 --row-length 1024 \
  --text-budget 512 --rows-per-microbatch 64 --bf16 --attention pallas --reuse 2 --eval-split unseen \
  --eval-tasks 60 --probe-every 100 --log-every 25 --save-at ${SAVE// /,} --out $R > $R/train.out 2>&1
tail -3 $R/train.out
G="--mode=eval --config.policy=model --config.eval.split=unseen --config.eval.num_tasks=60 --config.browser.driver=http
   --config.browser.pages=64 --config.sampler.slots=64 --config.sampler.prefill_rows=16 --config.model.attention=pallas
   --config.model.compute_dtype=bfloat16"
for S in $SAVE; do
  ( XLA_PYTHON_CLIENT_MEM_FRACTION=0.12 python3 main.py $G --config.model.path=$R/checkpoint-$S --workdir=$R/eval_g_$S > $R/eval_g_$S.out 2>&1
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.12 python3 main.py $G --config.model.path=$R/checkpoint-$S --config.eval.temperature=1.0 \
      --config.eval.samples=8 --workdir=$R/eval_t_$S > $R/eval_t_$S.out 2>&1 ) &
done
wait
python3 - <<'PY'
import json, os
R = "runs/wsc"
rows = []
for s in map(int, os.environ["SAVE"].split()):
    row = {"step": s}
    for kind in ("g", "t"):
        path = f"{R}/eval_{kind}_{s}/eval.json"
        if not os.path.exists(path):
            row[kind] = None; continue
        d = json.load(open(path))
        row[kind] = {"success": d["success_rate"], "by_level": {k: v["success_rate"] for k, v in d["by_difficulty"].items()},
                     "action_errors": d["action_errors"], "steps": d["total_steps"]}
        if kind == "t":  # the evaluation's own pass@k over its 8 samples per task
            row[kind]["pass8"] = d["samples"]["pass_at_k"]
            row[kind]["mixed"] = d["samples"]["mixed_outcomes"]
    rows.append(row); print(json.dumps(row))
json.dump(rows, open(f"{R}/sweep.json", "w"), indent=1)
PY
cp $R/sweep.json $R/log.jsonl $OUT/
tar czf $OUT/evals.tgz $R/*.out $R/eval_*/eval.json $R/eval_*/eval_episodes.jsonl 2>/dev/null
for S in $KEEP; do tar cf $OUT/ckpt-$S.tar -C $R checkpoint-$S; done
ls -la $OUT
