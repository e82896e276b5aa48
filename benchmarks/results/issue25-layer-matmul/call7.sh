# NOT YET RUN (2026-12-07, fourth session: no H200 could be started): the next call, with needs_h200.
# Issue 25, one H200 (2026-12-07, fourth session): call5.sh's first half alone, the learner at
# configs/instruct.py's row shape (16k rows, screenshots, full remat), last measured 2026-12-04
# at 38.8% MFU (goal 50%); the session's last device minutes.
export PYTHONPATH=$PWD/.whl/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 timeout 290 python3 benchmarks/learner.py --preset 8b --attention pallas --remat full --row-length 16384 --rows-per-microbatch 1 --images --prompt 800 --param-dtype bfloat16 --moment-dtype bfloat16 --microbatches 2 --updates 2 > $OUT/learner16k.log 2>&1; echo rc=$?
grep -v "^ " $OUT/learner16k.log | tail -n 5 | cut -c1-1500
