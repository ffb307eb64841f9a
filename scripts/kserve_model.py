"""A real KServe ModelServer serving SmolLM2-135M-Instruct over the Open Inference Protocol v2, REST and
gRPC (``inference.GRPCInferenceService`` on ``--grpc_port``), both bound to 127.0.0.1.

Run by ``scripts/engines.sh start kserve`` inside the engines' own kserve venv (kserve 0.21 SDK, torch
CPU, transformers), never imported by medhelm. It is the kind of custom predictor a hospital platform
team writes: a ``kserve.Model`` whose ``predict`` takes one BYTES tensor ``text_input`` (the prompt,
which it wraps in the model's chat template as one user turn) and returns ``text_output`` plus
``prompt_tokens``/``completion_tokens``/``finish_reason`` parameters. v2 parameters are scalars: over gRPC
``temperature`` arrives as a string, several ``stop`` sequences as a JSON array string (both transports).
Greedy decoding (temperature 0) on the same fp32 weights vLLM serves, so records can be compared with the
vLLM path.

Failure semantics (what KServe makes of them): a prompt longer than ``--max_model_len`` minus the
requested ``max_tokens`` raises ``kserve.errors.InvalidInput`` (HTTP 400 / gRPC INVALID_ARGUMENT); a
request while the model is not ready gets KServe's own "model not ready" answer over REST (HTTP 503); over
gRPC KServe calls ``load()`` again, which says ``ModelNotReady`` while the delay lasts (kserve 0.21's gRPC
interceptor then fails on ``ex.reason`` and the client sees UNKNOWN).
``--load_delay S`` keeps the model not ready for S seconds after the server starts (as while weights are
(re)loaded; KServe itself refuses to start with no ready model), so tests can see that state.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time

import kserve
import kserve.protocol.grpc.server as kserve_grpc
import kserve.protocol.rest.server as kserve_rest
import torch
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer
from kserve.errors import InvalidInput, ModelNotReady
from kserve.protocol.infer_type import to_http_parameters
from transformers import AutoModelForCausalLM, AutoTokenizer


class SmolLM(Model):
    def __init__(self, name: str, model_dir: str, max_model_len: int, load_delay: float = 0.0) -> None:
        super().__init__(name)
        self.model_dir, self.max_model_len, self.load_delay = model_dir, max_model_len, load_delay
        self.ready = self._loading = False
        self._lock = threading.Lock()  # one generate at a time: transformers on 2 cores, no batching

    def load(self) -> bool:
        if self._loading:
            # kserve 0.21 answers a REST infer for a model that is not ready with 503, but on gRPC
            # ModelInfer it calls load() again (DataPlane.get_model): while the weights are still loading
            # that is "not ready", which KServe's interceptor maps to UNAVAILABLE
            raise ModelNotReady(self.name)
        torch.set_num_threads(max(1, torch.get_num_threads()))
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(self.model_dir, torch_dtype=torch.float32).eval()
        self.ready = True
        return True

    def start(self) -> None:
        """Called by ModelServer after registering the model: with --load_delay, not ready for a while."""
        super().start()
        if self.load_delay > 0:
            self.ready, self._loading = False, True

            def ready_later() -> None:
                time.sleep(self.load_delay)
                self.ready, self._loading = True, False

            threading.Thread(target=ready_later, daemon=True).start()

    async def predict(self, payload: InferRequest, headers=None, response_headers=None) -> InferResponse:
        if not isinstance(payload, InferRequest):
            raise InvalidInput("this model speaks the Open Inference Protocol v2 only")
        tensor = next((i for i in payload.inputs if i.name == "text_input"), None)
        if tensor is None:
            raise InvalidInput("missing input tensor 'text_input'")
        data = tensor.data if tensor.data else list(tensor.as_numpy().ravel())  # gRPC: raw contents
        text = data[0].decode("utf-8") if isinstance(data[0], bytes) else str(data[0])
        params = to_http_parameters(payload.parameters or {})  # gRPC: InferParameter messages -> values
        max_tokens = int(params.get("max_tokens", 64))
        temperature = float(params.get("temperature", 0.0))
        stop = params.get("stop") or []
        if isinstance(stop, str) and stop.startswith("["):  # gRPC: a list parameter travels as JSON text
            stop = json.loads(stop)
        stop = [stop] if isinstance(stop, str) else list(stop)
        ids = self.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                 return_tensors="pt", return_dict=True)["input_ids"]
        n_prompt = int(ids.shape[1])
        if n_prompt + max_tokens > self.max_model_len:
            raise InvalidInput(f"This model's maximum context length is {self.max_model_len} tokens; the request "
                               f"has {n_prompt} prompt tokens and asks for {max_tokens} more")
        out, finish = await asyncio.to_thread(self._generate, ids, max_tokens, temperature, stop)
        return InferResponse(
            response_id=payload.id or "", model_name=self.name,
            infer_outputs=[InferOutput(name="text_output", shape=[1], datatype="BYTES", data=[out[0]])],
            parameters={"prompt_tokens": n_prompt, "completion_tokens": out[1], "finish_reason": finish})

    def _generate(self, ids, max_tokens: int, temperature: float, stop: list[str]):
        with self._lock, torch.inference_mode():
            kwargs = dict(do_sample=temperature > 0, max_new_tokens=max_tokens,
                          pad_token_id=self.tokenizer.eos_token_id)
            if temperature > 0:
                kwargs["temperature"] = temperature
            else:
                kwargs.update(temperature=None, top_p=None, top_k=None)
            gen = self.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)[0][ids.shape[1]:]
        n = int(gen.shape[0])
        text = self.tokenizer.decode(gen, skip_special_tokens=True)
        finish = "stop" if n < max_tokens or (n and int(gen[-1]) == self.tokenizer.eos_token_id) else "length"
        for s in stop:
            if s and s in text:
                text, finish = text[:text.index(s)], "stop"
        return (text, n), finish


def _bind_rest_to(host: str) -> None:
    """kserve 0.21 hard-codes ``host="0.0.0.0"`` for its REST server (protocol/rest/server.py); tests and
    benchmarks must listen on loopback only, so the uvicorn Config it builds gets ``host`` instead."""
    config = kserve_rest.uvicorn.Config

    class LoopbackConfig(config):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:
            kwargs["host"] = host
            super().__init__(*args, **kwargs)

    kserve_rest.uvicorn.Config = LoopbackConfig


def _bind_grpc_to(host: str) -> None:
    """kserve 0.21 hard-codes ``[::]:<grpc_port>`` (all interfaces) for its gRPC server
    (protocol/grpc/server.py); the server it builds gets ``host`` instead."""
    aio = kserve_grpc.aio

    def server(*args, **kwargs):
        srv = aio.server(*args, **kwargs)
        add_port = srv.add_insecure_port
        srv.add_insecure_port = lambda address: add_port(f"{host}:{address.rsplit(':', 1)[1]}")
        return srv

    kserve_grpc.aio = type("LoopbackAio", (), {"server": staticmethod(server)})


def main() -> None:
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser])
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--max_model_len", type=int, default=1024)
    parser.add_argument("--load_delay", type=float, default=0.0, help="seconds not ready after start (tests)")
    parser.add_argument("--host", default="127.0.0.1", help="REST bind address (KServe's own default: 0.0.0.0)")
    args, _ = parser.parse_known_args()
    model = SmolLM(args.model_name, args.model_dir, args.max_model_len, args.load_delay)
    model.load()
    _bind_rest_to(args.host)
    _bind_grpc_to(args.host)
    # REST v2 on http_port (kserve_v2, protocol rest), gRPC v2 on grpc_port (kserve_v2, protocol grpc)
    ModelServer(http_port=args.http_port, grpc_port=args.grpc_port, enable_grpc=True).start([model])


if __name__ == "__main__":
    main()
