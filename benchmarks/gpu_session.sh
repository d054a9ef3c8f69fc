#!/usr/bin/env bash
# The GPU runs of issues 12 to 16, in three parts that each fit one device call
# (under 10 minutes) on a machine with two H200s (torch 2.11, Triton 3.6):
#
#   bash benchmarks/gpu_session.sh A RESULTS_DIR   # cache and defect tests (GPU 0); the
#                                                  # model sweep and warm starts (GPU 1)
#   bash benchmarks/gpu_session.sh B RESULTS_DIR   # expert-parallel MoE on both GPUs
#   bash benchmarks/gpu_session.sh C RESULTS_DIR   # the data-dependent benchmark (GPU 0);
#                                                  # modes, user kernels, upstream's
#                                                  # FX-backend suite (GPU 1)
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
    track 0 cache-defects bash -c "
        timeout 280 python3 benchmarks/gpu_issue12.py $out/$day-h200-cache-tests.md;
        timeout 240 python3 benchmarks/gpu_issue13.py $out/$day-h200-issue13-defects.md"
    track 1 models-warm bash -c "
        timeout 290 python3 benchmarks/models.py --device cuda --budget 200 \
            --out $out/$day-h200-models.md;
        timeout 240 python3 benchmarks/warm_start.py --device cuda --jobs 6 \
            --out $out/$day-h200-warm-start.md"
    ;;
B)
    # Expert-parallel MoE on both GPUs, then the cache tests (GPU 0) and the rest of
    # the model sweep (GPU 1).
    timeout 300 python3 benchmarks/ep_moe.py --with-tests --out "$out/$day-h200x2-ep-moe.md" \
        >"$out/ep-moe.log" 2>&1
    echo "exit $?" >>"$out/ep-moe.log"
    track 0 cache-tests timeout 170 python3 benchmarks/gpu_issue12.py \
        "$out/$day-h200-cache-tests.md"
    track 1 models bash -c "
        timeout 90 python3 -m pytest -q -p no:cacheprovider --tb=long \
            test/inductor/test_fxir_defects.py -k 'StaleLauncher or UserKernelConstexpr';
        timeout 160 python3 benchmarks/models.py --device cuda --budget 120 \
            --out $out/$day-h200-models-2.md --cases batched_nms,box_filtering,\
fasterrcnn_postprocess_detections,rpn_filter_proposals,pyg_subgraph,pyg_remove_self_loops,\
pyg_sage_on_masked_graph,qwen3_moe_forward,mixtral_forward"
    ;;
C)
    # The benchmark (GPU 0); warm starts and upstream's suite (GPU 1).
    track 0 bench bash -c "
        timeout 200 python3 benchmarks/data_dependent.py --cold-only --cold-json $out/cold.json;
        timeout 250 python3 benchmarks/data_dependent.py --skip-cold --cold-json $out/cold.json \
            --seconds 4 --out $out/$day-h200-bench.md"
    track 1 warm-upstream bash -c "
        timeout 200 python3 benchmarks/warm_start.py --device cuda --jobs 8 \
            --programs P1 P3 P5 P6 P7 P8 --out $out/$day-h200-warm-start.md;
        timeout 230 python3 benchmarks/upstream_suite.py --budget-s 200 \
            --runs overlay-own,upstream-own --out $out/$day-h200-upstream-suite.md"
    ;;
*)
    echo "part A, B or C" >&2
    exit 2
    ;;
esac
wait
tail -n 3 "$out"/*.log
