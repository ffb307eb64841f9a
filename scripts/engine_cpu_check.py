"""Run by an engine venv's own interpreter (scripts/engines.sh): do this venv's CPU kernels run on this CPU?

torch and oneDNN choose their kernels at run time from what cpuid advertises (AVX-512, AMX); a host that
advertises an instruction set it does not run kills the engine by SIGILL at its first matrix product. This
runs, in this process, what the engines run first: fp32 and bf16 linear layers (oneDNN's AMX/AVX-512 paths),
SmolLM2's forward pass in fp32 through transformers (what scripts/kserve_model.py and vLLM load), and, in the
vLLM venv, vLLM's CPU extension. The last line is JSON: the kernels torch and oneDNN chose, and the greedy
next token. A signal ends it without that line; scripts/engines.sh then retries with the kernels capped at
AVX2 (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY) and records the cap for `engines.sh start`.

    <venv>/bin/python scripts/engine_cpu_check.py MODEL_DIR
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys


def main(model_dir: str) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        layer = torch.nn.Linear(256, 256).to(dtype)
        layer(torch.randn(8, 256, dtype=dtype)).sum().item()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    ids = tok("Is aspirin a medicine? Answer:", return_tensors="pt").input_ids
    with torch.no_grad():
        nxt = int(model(ids).logits[0, -1].argmax())
    vllm_ops = None
    if importlib.util.find_spec("vllm") is not None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import vllm._C  # noqa: F401  (vLLM's CPU kernels: loading runs their static initialisers)
        vllm_ops = "loaded"
    print(json.dumps({"aten_capability": torch.backends.cpu.get_cpu_capability(),
                      "onednn_max_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "(not capped)"),
                      "next_token": tok.decode([nxt]), "vllm_cpu_ops": vllm_ops}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
