#!/bin/bash
# RL learning-rate sweep from the answers-only stage 5 (runs/cpu_ans/checkpoint, copied over assets/warm_start for the runs; shipped there since stop 59) on one GPU host:
# the README's python main.py, browser-free (the host has no browser), every run sharing the GPU,
# on tuning seeds 4-6 (seed 3 ran on the 2-core VM) (the reported seeds 0-2 are kept out of the choice). Variants: variants.sh says which is which.
export PYTHONPATH=$PWD/.whl/site:$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
source benchmarks/results/rl-lr/variants.sh   # FLAGS[variant]: its main.py flags
mkdir -p runs/sweep_logs
for V in ${VARIANTS:-A B E F H}; do for S in ${SEEDS:-4 5 6}; do
  timeout ${LIMIT:-540} python3 main.py --workdir=runs/sweep_${V}_s$S --config.seed=$S \
    --config.browser.driver=http ${FLAGS[$V]} \
    > runs/sweep_logs/${V}_s$S.txt 2>&1 &
done; done
wait
for f in runs/sweep_*/summary.json; do
  python3 -c "import json,sys,os; d=json.load(open(sys.argv[1])); p=d['paired_change']; w=os.path.dirname(sys.argv[1])
e0, e1 = (json.load(open(os.path.join(w, n)))['action_errors'] for n in ('eval_before.json', 'eval.json'))
print(w.split('/')[1], d['success_before'], '->', d['success_after'], 'gained', p['gained'], 'lost', p['lost'],
      'updates', d['updates'], 'episodes', d['episodes'], 'uniform', d['groups_dropped_uniform'], 'action_errors', e0, '->', e1)" $f
done | tee $OUT/results.txt
tail -5 runs/sweep_logs/A_s4.txt; tar czf $OUT/sweep.tgz runs/sweep_logs runs/sweep_*/summary.json runs/sweep_*/metrics.jsonl runs/sweep_*/eval*.json*
