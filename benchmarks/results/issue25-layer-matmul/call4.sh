# Issue 25, one GPU, after call3 (69.0% of the bound at 64 requests, the goal 70%): the 8B
# sampler at 64 requests as in call3, then with XLA's command buffers (CUDA graphs) over the
# decode call's while loops too, to see how much of the step is launch overhead.
export PYTHONPATH=$PWD/.whl/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
s="benchmarks/sampler.py --preset 8b --dtype bfloat16 --text 300 --images 2 --new-tokens 200 --attention pallas --concurrency 64 --decode-steps 8 --blocks on --prefill-rows 16"
XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 timeout 150 python3 $s > $OUT/sampler8b_64.log 2>&1; echo default rc=$?
grep decode_fraction $OUT/sampler8b_64.log | head -1 | cut -c1-420
XLA_FLAGS=--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,WHILE,CONDITIONAL XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 timeout 150 python3 $s > $OUT/sampler8b_64_graphs.log 2>&1; echo graphs rc=$?
grep decode_fraction $OUT/sampler8b_64_graphs.log | head -1 | cut -c1-420
tail -n 2 $OUT/sampler8b_64_graphs.log | cut -c1-300
