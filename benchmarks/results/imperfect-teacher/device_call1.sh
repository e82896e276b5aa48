#!/bin/bash
# One H100/H200 call: stage 5, the shipped warm start (assets/warm_start) continued on the
# demonstrations of an imperfect teacher that leaves the last fact out of half its answers
# (benchmarks/warm_start.py --teacher-cuts 0.5), checkpoints saved early; each judged greedy
# and at temperature 1 (8 samples) on the default's 60 `unseen` tasks (seed 0), browser-free.
# Does the habit take (greedy falls) while sampling still finds the whole answer (pass@8 high)?
set -u
MINUTES=${MINUTES:-2.5}; SAVE=${SAVE:-"100 250 500 900"}; CUTS=${CUTS:-0.5}; LR=${LR:-3e-4}
export SAVE
export PYTHONPATH=$PWD/.whl/site:$PWD
R=runs/wst; mkdir -p $R $OUT
python3 -c "import sys; print(sys.version); import playwright.async_api" || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 benchmarks/warm_start.py --init assets/warm_start --interaction labels --teacher-cuts $CUTS --first-seed 400000 \
  --minutes $MINUTES --steps 4100 --warmup-steps 20 --learning-rate $LR --workers 14 --row-length 1024 \
  --text-budget 512 --rows-per-microbatch 64 --bf16 --attention pallas --reuse 2 --eval-split unseen \
  --eval-tasks 60 --probe-every 100 --log-every 25 --save-at ${SAVE// /,} --out $R > $R/train.out 2>&1
tail -3 $R/train.out
G="--mode=eval --config.policy=model --config.eval.split=unseen --config.eval.num_tasks=60 --config.browser.driver=http
   --config.browser.pages=64 --config.sampler.slots=64 --config.sampler.prefill_rows=16 --config.model.attention=pallas
   --config.model.compute_dtype=bfloat16"
for S in $SAVE end; do
  C=$R/checkpoint-$S; [ $S = end ] && C=$R/checkpoint
  ( XLA_PYTHON_CLIENT_MEM_FRACTION=0.09 python3 main.py $G --config.model.path=$C --workdir=$R/eval_g_$S > $R/eval_g_$S.out 2>&1
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.09 python3 main.py $G --config.model.path=$C --config.eval.temperature=1.0 \
      --config.eval.samples=8 --workdir=$R/eval_t_$S > $R/eval_t_$S.out 2>&1 ) &
done
wait
python3 - <<'PY'
import json, os
R = "runs/wst"
rows = []
for s in os.environ["SAVE"].split() + ["end"]:
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
for S in $SAVE; do tar cf $OUT/ckpt-$S.tar -C $R checkpoint-$S; done
tar cf $OUT/ckpt-end.tar -C $R checkpoint
ls -la $OUT
