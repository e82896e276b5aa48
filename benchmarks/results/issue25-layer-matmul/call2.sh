# Issue 25, one GPU, after call1: more tilings around the best (128,128,256,4,3, now the
# default) at 16 and 64 rows; then the 8B sampler at 1, 16 and 64 requests with the kernel,
# and transformers generate at 64 on the same GPU (the end-to-end goal: >= 3x).
export PYTHONPATH=$PWD/.whl/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 150 python3 benchmarks/layer_matmul.py --preset 8b --rows 16,64 --ways kernel --tilings 128,128,256,4,3 128,128,128,4,3 128,128,256,4,4 128,64,256,4,4 128,64,128,4,4 64,128,256,4,3 128,128,256,8,3 64,64,256,4,4 > $OUT/layer_matmul.jsonl 2> $OUT/layer_matmul.err; echo matmul rc=$?
tail -n 2 $OUT/layer_matmul.err | cut -c1-300
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/layer_matmul.jsonl"):
    r = json.loads(l)
    print(r) if "preset" in r else print(r["rows"], r["way"], r["tiling"], r["ms"], r["weights_gb_s"], r["fraction_of_copy_bandwidth"])
PY
s="benchmarks/sampler.py --preset 8b --dtype bfloat16 --text 300 --images 2 --new-tokens 200 --attention pallas --concurrency 1,16,64 --decode-steps 8 --blocks on --prefill-rows 16 --hf dynamic --hf-concurrency 64"
XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 timeout 390 python3 $s > $OUT/sampler8b_64.log 2>&1; echo sampler rc=$?
grep -v "^ \|^{$\|^}$" $OUT/sampler8b_64.log | tail -n 8 | cut -c1-600
