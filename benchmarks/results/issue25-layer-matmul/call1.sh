# Issue 25, one GPU: the decode step's linear maps reading the stacked weights in place
# (asyncwebrl/model/layer_matmul.py). (1) its tests natively; (2) all 8B layers' maps for
# 1/16/64 rows: XLA's slice + cuBLAS (the scan before), per-layer arrays (cuBLAS, nothing
# copied), the kernel at several tilings; (3) the 8B sampler at 1 and 16 requests, the tree
# before (_before/, untracked) and after, in the same call.
export PYTHONPATH=$PWD/.whl/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_layer_matmul.py tests/test_decode.py > $OUT/tests.log 2>&1; echo tests rc=$?; tail -n 3 $OUT/tests.log
timeout 200 python3 benchmarks/layer_matmul.py --preset 8b --rows 1,16,64 --tilings 128,128,512,4,3 128,128,256,4,3 128,128,1024,4,3 64,128,512,4,3 256,64,512,4,3 128,256,512,4,3 128,64,512,4,4 64,256,512,4,3 128,128,512,8,3 256,128,512,8,3 > $OUT/layer_matmul.jsonl 2> $OUT/layer_matmul.err; echo matmul rc=$?
tail -n 3 $OUT/layer_matmul.err
python3 - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/layer_matmul.jsonl")]
print(rows[0])
for r in rows[1:]:
    print(r["rows"], r["way"], r["tiling"], r["ms"], r["weights_gb_s"], r["fraction_of_copy_bandwidth"])
PY
s="benchmarks/sampler.py --preset 8b --dtype bfloat16 --text 300 --images 2 --new-tokens 200 --attention pallas --concurrency 1,16 --slots 16 --decode-steps 8 --blocks on --prefill-rows 16"
XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 timeout 170 python3 $s > $OUT/sampler8b_after.log 2>&1; echo after rc=$?
grep decode_fraction $OUT/sampler8b_after.log | head -2 | cut -c1-400
(cd _before && PYTHONPATH=$PWD/../.whl/site:$PWD XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 timeout 150 python3 $s > $OUT/sampler8b_before.log 2>&1; echo before rc=$?)
grep decode_fraction $OUT/sampler8b_before.log | head -2 | cut -c1-400
