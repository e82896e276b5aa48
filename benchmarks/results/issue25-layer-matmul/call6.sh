# Issue 25, one H100 (2026-12-07, fourth session): call5.sh's second half, the 8B-depth decode's
# compile with the in-place kernels (Pallas attention) against XLA attention. The 16k learner
# of call5.sh needs an H200 (95.7 GiB) and stays unrun.
export PYTHONPATH=$PWD/.whl/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 200 python3 benchmarks/compile_time.py --preset 8b --skip learner --repeats 1 --attention pallas > $OUT/compile_pallas.jsonl 2>&1; echo compile-pallas rc=$?
timeout 200 python3 benchmarks/compile_time.py --preset 8b --skip learner --repeats 1 --attention xla > $OUT/compile_xla.jsonl 2>&1; echo compile-xla rc=$?
tail -n 2 $OUT/compile_*.jsonl | cut -c1-900
