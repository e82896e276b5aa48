# NOT YET RUN (2026-12-07: the device time ran out before an H200 could be started again): the next call.
# Issue 25, one H200: the learner at configs/instruct.py's row shape (16k rows, screenshots, full
# remat) with this tree (flash tiles tuned on an H100 on 2026-12-07, 2-D linear maps); last
# measured 2026-12-04 at 38.8% MFU (goal 50%).
export PYTHONPATH=$PWD/.whl/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 timeout 330 python3 benchmarks/learner.py --preset 8b --attention pallas --remat full --row-length 16384 --rows-per-microbatch 1 --images --prompt 800 --param-dtype bfloat16 --moment-dtype bfloat16 --microbatches 2 --updates 2 > $OUT/learner16k.log 2>&1; echo rc=$?
grep -v "^ " $OUT/learner16k.log | tail -n 5 | cut -c1-1500
# the decode's compile with the in-place kernels at the 8B depth (narrow width), against XLA attention
timeout 200 python3 benchmarks/compile_time.py --preset 8b --skip learner --repeats 1 --attention pallas > $OUT/compile_pallas.jsonl 2>&1; echo compile-pallas rc=$?
timeout 200 python3 benchmarks/compile_time.py --preset 8b --skip learner --repeats 1 --attention xla > $OUT/compile_xla.jsonl 2>&1; echo compile-xla rc=$?
tail -n 1 $OUT/compile_*.jsonl | cut -c1-600
