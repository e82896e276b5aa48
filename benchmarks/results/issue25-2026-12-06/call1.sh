# Issue 25 on one GPU (2026-12-06/07; the device gave an H100 when no H200 came): the 8B sampler
# with decode calls of 8 steps over the occupied block and batched prefill against transformers,
# the 8B bf16 log-prob gap with Pallas on both sides, flash tiles at the 16k row.
export PYTHONPATH=$PWD/.whl/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 270 python3 benchmarks/sampler.py --preset 8b --dtype bfloat16 --text 300 \
  --images 2 --new-tokens 200 --attention pallas --hf dynamic --hf-concurrency 64 --concurrency 1,16,64 \
  --decode-steps 1,8 --blocks on --prefill-rows 16 > $OUT/sampler8b.log 2>&1
echo sampler rc=$?
XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 timeout 180 python3 benchmarks/logprob_gap.py --preset 8b --param-dtype bfloat16 \
  --dtype bfloat16 --attention pallas --requests 16 --prompt-tokens 300 --images 2 --new-tokens 64 --sharpen 8 \
  > $OUT/gap8b_sharpen8.log 2>&1
echo gap rc=$?
timeout 110 python3 benchmarks/attention.py --presets 8b --implementations pallas --repeats 5 --tiles \
  128,128,64,64 64,64,64,64 128,64,64,64 64,128,64,64 128,128,128,64 128,128,64,128 128,128,128,128 \
  128,128,32,64 128,128,64,32 128,128,64,64,4 > $OUT/tiles8b.log 2>&1
echo tiles rc=$?
tail -n 4 $OUT/*.log
