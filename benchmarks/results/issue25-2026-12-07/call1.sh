# Issue 25 (2026-12-07), one GPU: (1) does the sampler's compiled decode copy the KV cache?
# (the 8B 64-slot decode asked for a 25.34 GiB temporary on an H100 on 2026-12-06);
# (2) the 2B bf16 log-prob gap (sharpen 8, Pallas both sides) with XLA's split-K rewrite off and
# without screenshots (the vision tower's share): what makes the GPU's gap 10x the CPU's?
export PYTHONPATH=$PWD/.whl/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
m=benchmarks/sampler_memory.py
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 150 python3 $m --preset 8b --dtype bfloat16 --attention pallas --slots 64 --capacity 2320 --buckets 2112 > $OUT/8b_pallas.jsonl 2>$OUT/8b_pallas.err; echo 8b rc=$?
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 90 python3 $m --preset tiny --dtype bfloat16 --attention pallas --slots 16 --capacity 2048 --hlo $OUT/tiny_pallas.hlo > $OUT/tiny_pallas.jsonl 2>$OUT/tiny_pallas.err; echo tiny-pallas rc=$?
cat $OUT/*.jsonl; tail -n 3 $OUT/*.err
gzip $OUT/*.hlo
gap="python3 benchmarks/logprob_gap.py --preset 2b --param-dtype bfloat16 --dtype bfloat16 --residual-dtype float32 --attention pallas --requests 32 --prompt-tokens 300 --images 2 --new-tokens 100 --sharpen 8"
XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 timeout 150 $gap --reference > $OUT/gap2b_default.log 2>&1; echo gap-default rc=$?
XLA_FLAGS=--xla_disable_hlo_passes=splitk-rewriter XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 timeout 100 $gap > $OUT/gap2b_nosplitk.log 2>&1; echo gap-nosplitk rc=$?
XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 timeout 100 ${gap/--images 2/--images 0} > $OUT/gap2b_noimages.log 2>&1; echo gap-noimages rc=$?
grep -h -A1 "mean |d|" $OUT/gap2b_*.log
