# NOT YET RUN (2026-12-08): no device could be started in six tries, then lending was paused. The next call.
# Issue 25 (2026-12-08), one GPU: the learner at configs/instruct.py's row shape (16k rows, screenshots)
# after the tuned flash tiles, profiled; two remat policies that recompute less of the MLP; and the
# first update's compile at the full 8B width, split into its programs; the same learner with
# XLA's Triton GEMM fusions off (cuBLAS for every product: fewer autotuning compiles?). On a card under 100 GiB
# (an H100) the learner runs cut to 12 text layers (same rows, same per-layer work). Last, the first
# run again from JAX's persistent compilation cache that the first run filled.
export PYTHONPATH=$PWD/.whl/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
depth=36; [ "$gib" -lt 100000 ] && depth=12
layers="--layers $depth"
L="python3 benchmarks/learner.py --preset 8b --attention pallas --row-length 16384 --rows-per-microbatch 1 --images --prompt 800 --param-dtype bfloat16 --moment-dtype bfloat16 --microbatches 2 --updates 3 $layers"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.95
JAX_COMPILATION_CACHE_DIR=/tmp/jax_cache timeout 200 $L --remat full --trace $OUT/trace_full > $OUT/learner16k_full.log 2>&1; echo full rc=$?
python3 benchmarks/trace_summary.py $OUT/trace_full --top 45 > $OUT/trace_full.txt 2>&1
rm -rf $OUT/trace_full
XLA_FLAGS=--xla_gpu_enable_triton_gemm=false timeout 130 $L --remat full > $OUT/learner16k_full_cublas.log 2>&1; echo cublas rc=$?
timeout 130 $L --remat mlp_up > $OUT/learner16k_mlp_up.log 2>&1; echo mlp_up rc=$?
timeout 130 $L --remat mlp_up_offload_gate > $OUT/learner16k_mlp_up_offload_gate.log 2>&1; echo offload rc=$?
JAX_COMPILATION_CACHE_DIR=/tmp/jax_cache timeout 100 $L --remat full > $OUT/learner16k_full_cached.log 2>&1; echo cached rc=$?
timeout 90 python3 benchmarks/compile_time.py --preset 8b --hidden 0 --dtype bfloat16 --layers $depth --images --attention pallas --remat full --row-length 16384 --repeats 1 --skip sampler > $OUT/compile8b.jsonl 2> $OUT/compile8b.err; echo compile rc=$?
for f in $OUT/learner16k_*.log; do echo "== $f"; grep -E '"(update_s|tokens_per_s|mfu|mfu_datasheet|peak_memory_gib|first_update_s \(compile\)|setup_s|measured_peak_tflops)"' $f | tr -d '\n'; echo; grep -E "Error|error" $f | tail -n 2 | cut -c1-400; done
head -c 1500 $OUT/trace_full.txt; echo; cat $OUT/compile8b.jsonl; tail -n 2 $OUT/compile8b.err | cut -c1-400
