#!/usr/bin/env bash
# A Q4_K Qwen3.5 against transformers: the golden fixtures (tests/golden) are too small for K-quant
# rows, so the Q4_K GEMVs (and the int8 activations of Q4_KI) never run on them. This builds the
# one fixture that is too large to commit, qwen35_k (hidden 1024, tests/golden/make_fixtures.py
# LARGE_SPECS), as a Q4_K GGUF with reference logits computed by transformers from the values
# stored in that file (tests/golden/quant_reference.py), and checks voltinfer against them.
#
#   scripts/golden_q4k.sh make DIR        (needs torch + transformers) DIR/q4k.gguf, DIR/ref.safetensors
#   scripts/golden_q4k.sh run DIR VOLTINFER [TOL] [-- extra voltinfer args]
#       the 70-token sequence as one prompt (prefill: the GEMM path), token by token (--decode: the
#       GEMVs at T = 1) and in calls of 4 (-b 4: T = 4, the verify width), each compared by
#       scripts/compare_logits.py at TOL (default 1e-3: fp32 on the CPU; use 3e-2 on the GPU, as
#       scripts/gpu_test.sh does for the golden models). Exit status 1 if any comparison fails.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

make_check() {
  local dir=$1 tmp
  tmp=$(mktemp -d)
  mkdir -p "$dir"
  python3 "$here/tests/golden/make_fixtures.py" --out "$tmp" --only qwen35_k || return 1
  python3 "$here/tests/golden/hf_to_gguf.py" "$tmp/qwen35_k" "$dir/q4k.gguf" --outtype q4_k || return 1
  python3 "$here/tests/golden/quant_reference.py" "$tmp/qwen35_k" "$dir/q4k.gguf" "$dir/ref.safetensors" || return 1
  rm -rf "$tmp"
  ls -la "$dir"
}

run_check() {
  local dir=$1 vi=$2 tol=${3:-1e-3}
  shift 3 2>/dev/null || shift $#
  [ "${1:-}" = "--" ] && shift
  local tokens fails=0
  tokens=$(python3 "$here/scripts/compare_logits.py" --show-tokens "$dir/ref.safetensors" --ref-tensor logits_2) || return 2
  for form in prompt decode b4; do
    local flags=()
    case $form in decode) flags=(--decode) ;; b4) flags=(-b 4) ;; esac
    local out
    out=$(mktemp --suffix=.safetensors)
    if ! "$vi" logits -m "$dir/q4k.gguf" --tokens "$tokens" "${flags[@]}" "$@" --out "$out" > "$out.log" 2>&1; then
      echo "q4k $form: voltinfer failed: $(tail -2 "$out.log")"
      fails=$((fails + 1))
      continue
    fi
    local res
    res=$(python3 "$here/scripts/compare_logits.py" "$out" "$dir/ref.safetensors" --ref-tensor logits_2 --tol "$tol" 2>&1)
    local rc=$?
    echo "q4k $form ($*): $(echo "$res" | grep -E 'max_rel_row|argmax' | tr -s ' ' | tr '\n' ' ')$([ $rc = 0 ] && echo PASS || echo FAIL)"
    [ $rc = 0 ] || fails=$((fails + 1))
    rm -f "$out" "$out.log"
  done
  return $((fails > 0))
}

case "${1:-}" in
  make) make_check "$2" ;;
  run) shift; run_check "$@" ;;
  *) sed -n '2,15p' "$0"; exit 2 ;;
esac
