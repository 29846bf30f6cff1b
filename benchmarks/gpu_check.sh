#!/usr/bin/env bash
# The GPU checks in one go, on a machine with an NVIDIA GPU, a CUDA build of torch and
# Triton (no virtual environment needed: run from the repository's root):
#   1. builds the extension for this machine (-march=native, all cores);
#   2. runs tests/test_triton_cuda.py (the compiled kernels against the CPU's reference);
#   3. times S and L with `snn-ipu bench --device cuda`, torch.compile last (it compiles
#      for minutes per layer shape), each config under its own time limit.
# usage: benchmarks/gpu_check.sh OUTDIR   (writes log.txt and bench_gpu_{S,L}.{json,png})
# PYTHON, TEST_TIMEOUT and BENCH_TIMEOUT (seconds per config) override the defaults.
set -u
out=${1:?usage: benchmarks/gpu_check.sh OUTDIR}
py=${PYTHON:-python3}
mkdir -p "$out"
log="$out/log.txt"
export PYTHONUNBUFFERED=1
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  $py -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__,
triton.__version__ and 'triton ' + triton.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee "$log"

start=$SECONDS
if ! SNN_IPU_NATIVE=1 SNN_IPU_BUILD_JOBS=$(nproc) timeout 300 \
    $py setup.py -q build_ext --inplace >>"$log" 2>&1; then
  echo "extension build failed:"; tail -30 "$log"; exit 1
fi
echo "build: $((SECONDS - start)) s" | tee -a "$log"

start=$SECONDS
timeout "${TEST_TIMEOUT:-900}" $py -m pytest -q -s -p no:cacheprovider tests/test_triton_cuda.py \
  2>&1 | tee -a "$log" | grep -E "passed|failed|error|Error|FAILED|L-sized" | tail -40
echo "tests: $((SECONDS - start)) s" | tee -a "$log"

for cfg in S L; do
  start=$SECONDS
  timeout "${BENCH_TIMEOUT:-1800}" $py -m snn_ipu bench --device cuda --configs "$cfg" \
    --activities 0.01 0.02 0.1 0.3 --repeats 10 --max-seconds 2 \
    --gpu-backends triton_sparse triton_exact spikingjelly torch_loop snntorch torch_compile \
    --out "$out" 2>&1 | tee -a "$log" | grep -v -i warn
  echo "bench $cfg: $((SECONDS - start)) s" | tee -a "$log"
done
