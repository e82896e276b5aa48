# Issue 25 on one H200 (needs 141 GB): the 8B learner at 8 x 2,048 (mlp remat; throughput and
# first-update time after the scan), and at configs/instruct.py's 16k rows with screenshots:
# full remat (the baseline, 38.8% MFU on 2026-12-04) against mlp remat with a bf16 gradient
# accumulator (what would let the lighter remat fit); and the 2,048 row again without XLA's
# gemm autotuning (what the first update's compile spends at full width).
export PYTHONPATH=$PWD/.whl/site:$PWD
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.95
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
common="--preset 8b --attention pallas --param-dtype bfloat16 --moment-dtype bfloat16 --microbatches 2 --updates 2"
timeout 140 python3 benchmarks/learner.py $common --remat mlp --row-length 2048 --rows-per-microbatch 8 \
  > $OUT/learner8b_2048_mlp.log 2>&1; echo 2048 rc=$?
timeout 140 python3 benchmarks/learner.py $common --remat full --row-length 16384 --rows-per-microbatch 1 --images \
  --prompt 800 > $OUT/learner8b_16k_full.log 2>&1; echo 16k-full rc=$?
timeout 140 python3 benchmarks/learner.py $common --remat mlp --gradient-dtype bfloat16 --row-length 16384 \
  --rows-per-microbatch 1 --images --prompt 800 > $OUT/learner8b_16k_mlp_bf16grad.log 2>&1; echo 16k-mlp rc=$?
XLA_FLAGS=--xla_gpu_autotune_level=0 timeout 140 python3 benchmarks/learner.py $common --remat mlp --row-length 2048 \
  --rows-per-microbatch 8 > $OUT/learner8b_2048_mlp_noautotune.log 2>&1; echo 2048-noautotune rc=$?
tail -n 3 $OUT/*.log
