"""ASGI middleware that lets the tinker 0.38 SDK talk to skyrl 0.3.0's Tinker API.

The SDK speaks protobuf and newer endpoints where skyrl 0.3.0 speaks JSON:
- it posts `/api/v1/forward_backward` as a protobuf body (Content-Type application/x-protobuf;
  zstd-compressed only when the server's client config sets `proto_compress_fwdbwd`, which skyrl's
  does not) and sends forward-only passes to the same path with `forward_only=true`. skyrl expects
  JSON there (and a separate `/api/v1/forward`): it fails with HTTP 500 (a UnicodeDecodeError while
  reporting the unparsable body), which the SDK retries for about 5 minutes;
- it fetches forward/backward and sample results from `/api/v1/retrieve_future` with
  `Accept: application/x-protobuf` and refuses a JSON answer ("server predates proto response
  serialization");
- it expects the promise that `/api/v1/asample` returns to carry `sample_sequence_ids`, one id per
  requested sample, and fails every sample without them;
- `create_training_client_from_state[_with_optimizer]` sends `/api/v1/load_weights` with no model
  (session_id + model_seq_id instead) and then addresses the new model as
  "{session_id}:train:{model_seq_id}"; skyrl loads weights only into an existing model. The
  middleware creates that model first (base model and LoRA rank from the checkpoint's training run)
  and maps the SDK's name to skyrl's model id in every later JSON request;
- `ServiceClient.close()` posts `/api/v1/sessions/{id}/finish`, which skyrl lacks (404, raised by
  close()). The middleware answers it and unloads the session's models, so their LoRA slots are
  free at once instead of after skyrl's session timeout.
This middleware translates these; every other request passes through untouched (bodies
with `Content-Encoding: zstd` are decompressed whatever their path). It also adds the `loss:sum`
metric that the hosted service reports and skyrl leaves out (the SDK's forward_backward_custom reads
it): the sum of the per-token `elementwise_loss` outputs.

It also enforces an API key when TINKER_SERVER_API_KEY is set (the hosted service rejects a wrong
key with 401; skyrl accepts any), so clients can test their failure handling against it.
"""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Any

import httpx
import numpy as np

_PROTO = "application/x-protobuf"
_JSON_PATHS = ("/api/v1/asample", "/api/v1/load_weights", "/api/v1/create_model")  # bodies read here
_FINISH = re.compile(r"^/api/v1/sessions/([^/]+)/finish$")


def _tensor_to_list(tensor: Any, pb: Any) -> list[float] | list[int]:
    """A proto Tensor (dense or sparse CSR) as a flat Python list."""
    dtypes = {
        pb.DTYPE_FLOAT32: np.float32,
        pb.DTYPE_INT64: np.int64,
        pb.DTYPE_INT32: np.int32,
    }
    if tensor.dtype == pb.DTYPE_BFLOAT16:
        def decode(raw: bytes) -> np.ndarray:  # bfloat16 = the high half of a float32
            return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        dtype = dtypes[tensor.dtype]

        def decode(raw: bytes) -> np.ndarray:
            return np.frombuffer(raw, dtype)

    if tensor.WhichOneof("encoding") == "sparse_csr":
        csr = tensor.sparse_csr
        values = decode(csr.values)
        crow = np.frombuffer(csr.crow_indices, np.int64)
        cols = np.frombuffer(csr.col_indices, np.int64)
        shape = list(tensor.shape)
        dense = np.zeros(shape if len(shape) == 2 else (len(crow) - 1, int(cols.max(initial=-1)) + 1), values.dtype)
        for row in range(len(crow) - 1):
            dense[row, cols[crow[row] : crow[row + 1]]] = values[crow[row] : crow[row + 1]]
        return dense.reshape(-1).tolist()
    return decode(tensor.dense).tolist()


def _chunk_to_json(chunk: Any) -> dict[str, Any]:
    kind = chunk.WhichOneof("chunk")
    if kind == "encoded_text":
        return {"type": "encoded_text", "tokens": np.frombuffer(chunk.encoded_text.tokens, np.int32).tolist()}
    if kind == "image":
        image: dict[str, Any] = {
            "type": "image",
            "data": base64.b64encode(chunk.image.data).decode(),
            "format": chunk.image.format,
        }
        if chunk.image.HasField("expected_tokens"):
            image["expected_tokens"] = chunk.image.expected_tokens
        return image
    raise ValueError(f"model input chunk {kind!r} is not supported by this server")


def _batched(arrays: list[np.ndarray], pb: Any) -> Any:
    """Per-datum 1-D arrays as one proto BatchedTensor (concatenated bytes + byte offsets)."""
    is_float = all(a.dtype.kind == "f" for a in arrays)
    dtype = np.float32 if is_float else np.int64
    parts = [np.ascontiguousarray(a, dtype=dtype).reshape(-1) for a in arrays]
    offsets = np.cumsum([0] + [p.nbytes for p in parts]).astype(np.int64)
    return pb.BatchedTensor(
        data=b"".join(p.tobytes() for p in parts),
        offsets=offsets.tobytes(),
        dtype=pb.DTYPE_FLOAT32 if is_float else pb.DTYPE_INT64,
    )


def with_loss_sum(result: dict[str, Any]) -> dict[str, Any]:
    """The hosted service's `loss:sum` metric, from skyrl's per-token weighted losses."""
    metrics = dict(result.get("metrics") or {})
    if "loss:sum" not in metrics:
        metrics["loss:sum"] = float(
            sum(np.sum(out["elementwise_loss"]["data"]) for out in result["loss_fn_outputs"] if "elementwise_loss" in out)
        )
    return dict(result, metrics=metrics)


def result_json_to_proto(result: dict[str, Any]) -> bytes | None:
    """A skyrl ForwardBackwardOutput / SampleOutput (JSON) as the SDK's proto; None for anything else."""
    from tinker.proto import tinker_public_pb2 as pb

    if "loss_fn_outputs" in result:
        result = with_loss_sum(result)
        outputs = result["loss_fn_outputs"]
        names = sorted({name for out in outputs for name in out})
        record = pb.ArrayRecord(num_datums=len(outputs))
        for name in names:
            record.fields[name].CopyFrom(_batched([np.asarray(out[name]["data"]) for out in outputs], pb))
        return pb.ForwardBackwardOutput(
            loss_fn_output_type=result.get("loss_fn_output_type") or "ArrayRecord",
            loss_fn_outputs=[record] if outputs else [],
            metrics={k: float(v) for k, v in result["metrics"].items()},
        ).SerializeToString()
    if "sequences" in result:
        stop = {"stop": pb.STOP_REASON_STOP, "length": pb.STOP_REASON_LENGTH}
        response = pb.SampleResponse(
            sequences=[
                pb.SampledSequence(
                    stop_reason=stop[seq["stop_reason"]],
                    tokens=np.asarray(seq["tokens"], np.int32).tobytes(),
                    logprobs=np.asarray(seq["logprobs"], np.float32).tobytes() if seq.get("logprobs") is not None else None,
                )
                for seq in result["sequences"]
            ]
        )
        if result.get("prompt_logprobs"):
            # position 0 has no logprob: skyrl leaves it out or sends None; the SDK reads floats
            logprobs = [np.nan if x is None else x for x in result["prompt_logprobs"]]
            response.prompt_logprobs = np.asarray(logprobs, np.float32).tobytes()
        return response.SerializeToString()
    return None


def forward_backward_proto_to_json(body: bytes) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) for skyrl from the SDK's protobuf ForwardBackwardRequest."""
    from tinker.proto import tinker_public_pb2 as pb  # the SDK's own schema, same version as the client

    msg = pb.ForwardBackwardRequest()
    msg.ParseFromString(body)
    # loss_fn_config_v2 supersedes the legacy float map; skyrl takes floats only.
    config: dict[str, float] = {k: v for k, v in msg.loss_fn_config.items()}
    for key, value in msg.loss_fn_config_v2.items():
        if value.WhichOneof("value") == "number":
            config[key] = value.number
    data = [
        {
            "model_input": {"chunks": [_chunk_to_json(c) for c in datum.model_input]},
            "loss_fn_inputs": {name: {"data": _tensor_to_list(t, pb)} for name, t in datum.loss_fn_inputs.items()},
        }
        for datum in msg.data
    ]
    fb_input = {"data": data, "loss_fn": msg.loss_fn, "loss_fn_config": config or None}
    if msg.forward_only:
        return "/api/v1/forward", {"model_id": msg.model_id, "forward_input": fb_input}
    return "/api/v1/forward_backward", {"model_id": msg.model_id, "forward_backward_input": fb_input}


class _Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class TinkerProtoShim:
    """ASGI middleware between tinker>=0.38 clients and skyrl 0.3.0 (see the module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.api_key = os.environ.get("TINKER_SERVER_API_KEY") or None
        self.model_ids: dict[str, str] = {}  # the SDK's "{session}:train:{seq}" -> skyrl's model id
        self.session_models: dict[str, list[str]] = {}  # session id -> skyrl model ids created in it

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"]
        if self.api_key is not None and path.startswith("/api/") and path != "/api/v1/healthz":
            if headers.get(b"x-api-key") != self.api_key:
                return await _send_json(send, 401, {"detail": "Invalid API key"})
        if (finish := _FINISH.match(path)) and scope["method"] == "POST":
            await _read_body(receive)
            await self._unload_session(finish.group(1), scope, headers)
            return await _send_json(send, 200, {})
        if path == "/api/v1/retrieve_future" and _PROTO in headers.get(b"accept", ""):
            send = _rewrite_response(send, lambda result: _as(_PROTO, result_json_to_proto(result)))
        zstd = headers.get(b"content-encoding", "").lower() == "zstd"
        proto = _PROTO in headers.get(b"content-type", "")
        rewrite_json = scope["method"] == "POST" and (path in _JSON_PATHS or bool(self.model_ids))
        if not (zstd or proto or rewrite_json):
            return await self.app(scope, receive, send)

        body = await _read_body(receive)
        try:
            if zstd:
                import zstandard

                body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
            if proto:
                if path != "/api/v1/forward_backward":
                    return await _send_json(send, 415, {"detail": f"protobuf bodies are not supported on {path}"})
                path, payload = forward_backward_proto_to_json(body)
                body = json.dumps(payload).encode()
            payload = json.loads(body) if body else None
            if path == "/api/v1/create_model":
                session_id = payload.get("session_id")
                send = _rewrite_response(send, lambda created: self._remember(session_id, created))
            if path == "/api/v1/asample":
                num_samples = int(payload.get("num_samples", 1))
                send = _rewrite_response(
                    send, lambda promise: _as("application/json", _with_sequence_ids(promise, num_samples))
                )
        except Exception as exc:  # a body we cannot read is the client's error, not a 500 to retry
            return await _send_json(send, 400, {"detail": f"unreadable request body: {exc!r}"})
        if isinstance(payload, dict):
            if path == "/api/v1/load_weights" and not payload.get("model_id"):
                try:
                    payload["model_id"] = await self._model_for_load(payload, scope, headers)
                except _Refused as exc:
                    return await _send_json(send, exc.status, {"detail": exc.detail})
            if payload.get("model_id") in self.model_ids:
                payload["model_id"] = self.model_ids[payload["model_id"]]
            body = json.dumps(payload).encode()

        kept = [(k, v) for k, v in scope["headers"] if k.lower() not in (b"content-encoding", b"content-length", b"content-type")]
        kept += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        new_scope = dict(scope, path=path, raw_path=path.encode(), headers=kept)
        await self.app(new_scope, _replay(body, receive), send)

    async def _model_for_load(self, request: dict, scope: dict, headers: dict) -> str:
        """Create the skyrl model that a model-less load_weights request loads into; its model id."""
        path = str(request.get("path", ""))
        parts = path.removeprefix("tinker://").split("/")
        if not path.startswith("tinker://") or len(parts) != 3 or parts[1] != "weights":
            raise _Refused(400, f"load_weights path must be tinker://<run>/weights/<name>, got {path!r}")
        host, port = scope["server"]
        auth = {"X-API-Key": headers[b"x-api-key"]} if b"x-api-key" in headers else {}
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", headers=auth, timeout=600) as client:
            run = await client.get(f"/api/v1/training_runs/{parts[0]}")
            if run.status_code != 200:
                raise _Refused(run.status_code, f"training run of {path}: {run.text}")
            run_info = run.json()
            created = await client.post(
                "/api/v1/create_model",
                json={
                    "session_id": request.get("session_id"),
                    "base_model": request.get("base_model") or run_info["base_model"],
                    "lora_config": {"rank": run_info["lora_rank"]},
                },
            )
            if created.status_code != 200:
                raise _Refused(created.status_code, f"creating a model for {path}: {created.text}")
            model = created.json()
            done = await client.post("/api/v1/retrieve_future", json={"request_id": model["request_id"]})
            if done.status_code != 200:
                raise _Refused(done.status_code, f"creating a model for {path}: {done.text}")
        self.model_ids[f"{request.get('session_id')}:train:{request.get('model_seq_id')}"] = model["model_id"]
        return model["model_id"]

    def _remember(self, session_id: str | None, created: dict[str, Any]) -> None:
        if session_id and "model_id" in created:
            self.session_models.setdefault(session_id, []).append(created["model_id"])

    async def _unload_session(self, session_id: str, scope: dict, headers: dict) -> None:
        """Unload the models a finished session created (best effort: skyrl also times them out)."""
        models = self.session_models.pop(session_id, [])
        aliases = [alias for alias in self.model_ids if alias.startswith(f"{session_id}:")]
        for alias in aliases:
            self.model_ids.pop(alias)
        if not models:
            return
        host, port = scope["server"]
        auth = {"X-API-Key": headers[b"x-api-key"]} if b"x-api-key" in headers else {}
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", headers=auth, timeout=30) as client:
            for model_id in models:
                try:
                    await client.post("/api/v1/unload_model", json={"model_id": model_id})
                except httpx.HTTPError:
                    pass


def _as(content_type: str, body: bytes | None) -> tuple[str, bytes] | None:
    return None if body is None else (content_type, body)


def _with_sequence_ids(promise: dict[str, Any], num_samples: int) -> bytes:
    ids = [f"{promise['request_id']}-{i}" for i in range(num_samples)]
    return json.dumps(dict(promise, sample_sequence_ids=ids)).encode()


def _rewrite_response(send: Any, transform: Any) -> Any:
    """Wrap `send`: a 200 JSON answer goes through `transform` (JSON -> (content type, bytes), or
    None to keep it as it was)."""
    start: dict | None = None
    parts: list[bytes] = []

    async def wrapped(message: dict) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            start = message
            return
        if message["type"] != "http.response.body" or start is None:
            return await send(message)
        parts.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body, headers = b"".join(parts), list(start.get("headers", []))
        if start["status"] == 200:
            try:
                encoded = transform(json.loads(body))
            except Exception:  # not an answer we know: leave it as it was
                encoded = None
            if encoded is not None:
                kind, body = encoded
                headers = [(k, v) for k, v in headers if k.lower() not in (b"content-type", b"content-length")]
                headers += [(b"content-type", kind.encode()), (b"content-length", str(len(body)).encode())]
        await send(dict(start, headers=headers))
        await send({"type": "http.response.body", "body": body})

    return wrapped


async def _read_body(receive: Any) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(parts)


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect, as the server would

    return replay


async def _send_json(send: Any, status: int, payload: dict) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
