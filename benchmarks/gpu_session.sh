#!/usr/bin/env bash
# The GPU runs of issues 12 and 16, in three parts that each fit one device call
# (under 10 minutes) on a machine with two H200s (torch 2.11, Triton 3.6):
#
#   bash benchmarks/gpu_session.sh A RESULTS_DIR   # C++ kernels in a CUDA graph; whole
#                                                  # transformers models (both GPUs)
#   bash benchmarks/gpu_session.sh B RESULTS_DIR   # cache tests, warm starts (GPU 0);
#                                                  # the rest of the model sweep (GPU 1)
#   bash benchmarks/gpu_session.sh C RESULTS_DIR   # upstream's FX-backend suite, defect
#                                                  # tests (GPU 0); the benchmark's cold
#                                                  # and new-size compiles (GPU 1)
#
# Each track writes its markdown report into RESULTS_DIR and its log beside it.
# expecttest, which the machine lacks, comes from the wheel in .whl/ if present.
set -uo pipefail
part=$1
out=$2
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
        export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
day=$(date +%F)

track() {  # track GPU NAME COMMAND...: run COMMAND on one GPU, log to NAME.log
    local gpu=$1 name=$2
    shift 2
    (CUDA_VISIBLE_DEVICES=$gpu "$@" >"$out/$name.log" 2>&1; echo "exit $?" >>"$out/$name.log") &
}

case $part in
A)
    # C++ kernels in a CUDA graph (the test), then whole transformers models split
    # over both GPUs; each model run writes JSON after every case (merged later with
    # `python benchmarks/models.py --merge`).
    track 0 models-1 bash -c "
        timeout 100 python3 -m pytest -q -p no:cacheprovider test/inductor/test_fxir_cpp_kernels.py;
        timeout 420 python3 benchmarks/models.py --device cuda --budget 260 \
            --cases mixtral_forward,qwen3_moe_forward --json $out/models-1.json"
    track 1 models-2 timeout 520 python3 benchmarks/models.py --device cuda --budget 330 \
        --cases olmoe_forward,mixtral_train_step,qwen3_moe_train_step --json "$out/models-2.json"
    ;;
B)
    # Cache tests across processes and C++ kernels (GPU 0), then warm starts; the rest
    # of the model sweep (GPU 1).
    track 0 cache-warm bash -c "
        timeout 300 python3 benchmarks/gpu_issue12.py $out/$day-h200-cache-tests.md;
        timeout 210 python3 benchmarks/warm_start.py --device cuda --jobs 8 --repeat 3 \
            --programs P1 P3 P5 P6 --out $out/$day-h200-warm-start.md"
    track 1 models-3 timeout 520 python3 benchmarks/models.py --device cuda --budget 420 \
        --cases olmoe_train_step,mixtral_moe_block,qwen3_moe_block,olmoe_block,\
mixtral_moe_block_train_step,batched_nms,box_filtering,fasterrcnn_postprocess_detections,\
rpn_filter_proposals,pyg_subgraph,pyg_remove_self_loops,pyg_sage_on_masked_graph \
        --json "$out/models-3.json"
    ;;
C)
    # Upstream's suite under Inductor's default config and its own (GPU 0, then the
    # issue-13 defect tests); warm starts (GPU 1; each process takes 15 to 20 s of
    # start-up on that host, so two programs, two repeats: about 330 s).
    track 0 upstream-defects bash -c "
        timeout 300 python3 benchmarks/upstream_suite.py --budget-s 280 --jobs 2 \
            --runs overlay-default,overlay-own --out $out/$day-h200-upstream-suite.md;
        timeout 200 python3 benchmarks/gpu_issue13.py $out/$day-h200-issue13-defects.md"
    track 1 warm timeout 500 python3 benchmarks/warm_start.py --device cuda --jobs 4 \
        --repeat 2 --programs P1 P3 --out "$out/$day-h200-warm-start.md"
    ;;
*)
    echo "part A, B or C" >&2
    exit 2
    ;;
esac
wait
tail -n 3 "$out"/*.log
