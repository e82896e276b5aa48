# Issue 25, one GPU, after call2: the kernel's new default (64 x 64 tiles, 4 stages, K parts
# capped so that the float32 partials stay within a quarter of the weight) and settings around
# it at 1, 16 and 64 rows; then the 8B sampler at 1, 16 and 64 requests, after (this tree) and
# before (_before/: the scan's slices), in the same call.
export PYTHONPATH=$PWD/.whl/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 120 python3 benchmarks/layer_matmul.py --preset 8b --rows 1,16,64 --ways kernel --tilings 64,64,256,4,4 64,64,256,4,5 64,64,512,4,4 64,128,256,4,4 32,128,256,4,4 64,64,128,4,4 64,64,256,2,4 > $OUT/layer_matmul.jsonl 2> $OUT/layer_matmul.err; echo matmul rc=$?
tail -n 2 $OUT/layer_matmul.err | cut -c1-300
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/layer_matmul.jsonl"):
    r = json.loads(l)
    print(r) if "preset" in r else print(r["rows"], r["way"], r["tiling"], r["ms"], r["weights_gb_s"], r["fraction_of_copy_bandwidth"])
PY
s="benchmarks/sampler.py --preset 8b --dtype bfloat16 --text 300 --images 2 --new-tokens 200 --attention pallas --concurrency 1,16,64 --decode-steps 8 --blocks on --prefill-rows 16"
XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 timeout 170 python3 $s > $OUT/sampler8b_after.log 2>&1; echo after rc=$?
grep decode_fraction $OUT/sampler8b_after.log | head -3 | cut -c1-420
(cd _before && PYTHONPATH=$PWD/../.whl/site:$PWD XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 timeout 170 python3 $s > $OUT/sampler8b_before.log 2>&1; echo before rc=$?)
grep decode_fraction $OUT/sampler8b_before.log | head -3 | cut -c1-420
tail -n 2 $OUT/sampler8b_before.log | cut -c1-300
