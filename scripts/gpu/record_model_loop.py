#!/usr/bin/env python3
"""Record a real torch-profiler trace of a small diffusion-transformer-like loop, with the
figures a test needs to check the runner's triage against it.

Run on a machine with a CUDA GPU and PyTorch (no sglang needed):

    python3 scripts/gpu/record_model_loop.py OUTDIR

It writes OUTDIR/model-loop.json.gz (the Chrome trace the torch profiler exports, gzipped),
OUTDIR/model-loop-stack.json.gz (the same loop with Python stacks), OUTDIR/model-loop-graph.json.gz
(each step's block replayed as a CUDA graph: the pair is two-trace mode's mapping and formal
input), OUTDIR/model-decode.json.gz with OUTDIR/model-decode.truth.json (record_decode) and
OUTDIR/model-loop.truth.json: what the loop did, measured outside the profiler with CUDA
events, so the triage's figures can be held to something it did not compute itself.

The loop is shaped like one denoising stage of a DiT: per step an RMSNorm, a fused QKV GEMM,
scaled-dot-product attention, an output GEMM and a GELU MLP, and where the GPU has FP8 an FP8 GEMM (torch._scaled_mm) (GEMMs of known shapes, recorded
with record_shapes so the roofline can cost them), a copy on a second stream that overlaps
the GEMMs (the shape of an all-gather's copy engine traffic), and a host sleep between steps
that leaves the GPU idle for a known time. A "DecodingStage" replays a CUDA graph (kernels
with no CPU op of their own).
"""
import gzip
import json
import os
import shutil
import sys
import time

import torch
import torch.nn.functional as F

TOKENS = 2048  # sequence length of the latent tokens
HIDDEN = 3072  # model width
HEADS = 24
HEAD_DIM = HIDDEN // HEADS
MLP = 4 * HIDDEN
STEPS = 6
HOST_SLEEP_S = 0.004  # host-side gap after each step's synchronize
COPY_BYTES = 64 << 20  # the side stream's copy per step
DT = torch.bfloat16


def block(x, w):
    h = F.rms_norm(x, (HIDDEN,), w["norm"])
    qkv = F.linear(h, w["qkv"])  # [T, 3H]: aten::linear -> aten::mm/addmm
    q, k, v = qkv.view(TOKENS, 3, HEADS, HEAD_DIM).permute(1, 2, 0, 3).unbind(0)
    a = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0))
    a = a.squeeze(0).transpose(0, 1).reshape(TOKENS, HIDDEN)
    x = x + F.linear(a, w["out"])
    h = F.rms_norm(x, (HIDDEN,), w["norm2"])
    h = F.gelu(F.linear(h, w["up"]), approximate="tanh")
    return x + F.linear(h, w["down"])


def time_cuda(fn, rounds=7, per_round=20, warm=10):
    """Time of one call of fn in ms, outside any profiler: per round, CUDA events around
    per_round back-to-back calls (so the host's launch gaps hide behind queued work), the
    median over the rounds."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(per_round):
            fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / per_round)
    ts.sort()
    return ts[len(ts) // 2]


def export(prof, raw):
    """Write prof's Chrome trace to raw + ".gz" (gzipped; the plain file is removed)."""
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(raw)


def record_decode(out, dev, acts):
    """An LLM-decode-like loop: 8 tokens through a large MLP (up and down GEMMs of a Llama-8B
    layer's shape), memory-bound; each step annotated decode_step_N. Writes
    OUTDIR/model-decode.json.gz and OUTDIR/model-decode.truth.json (the GEMMs' event timings and
    the bytes they must move)."""
    tokens, hidden, inter = 8, 4096, 14336
    wu = torch.randn(inter, hidden, device=dev, dtype=DT) * 0.02
    wd = torch.randn(hidden, inter, device=dev, dtype=DT) * 0.02
    xt = torch.randn(tokens, hidden, device=dev, dtype=DT)
    ht = torch.randn(tokens, inter, device=dev, dtype=DT)

    def step():
        return F.linear(F.silu(F.linear(xt, wu)), wd)

    up_ms = time_cuda(lambda: F.linear(xt, wu))
    down_ms = time_cuda(lambda: F.linear(ht, wd))

    def loop():
        for i in range(STEPS):
            with torch.profiler.record_function(f"decode_step_{i}"):
                step()
                torch.cuda.synchronize()

    loop()
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        loop()
        torch.cuda.synchronize()
    export(prof, os.path.join(out, "model-decode.json"))
    el = 2  # bytes per bf16 element
    gemm_bytes = el * (tokens * hidden + inter * hidden + tokens * inter)  # A and B read, C written
    truth = {
        "steps": STEPS, "tokens": tokens, "hidden": hidden, "inter": inter,
        "up": {"ms": up_ms, "bytes": gemm_bytes, "gbps": gemm_bytes / (up_ms * 1e-3) / 1e9},
        "down": {"ms": down_ms, "bytes": gemm_bytes, "gbps": gemm_bytes / (down_ms * 1e-3) / 1e9},
        "note": "event-timed medians outside the profiler (as in model-loop.truth.json); bytes = both "
        "operands read once and the output written once, as the roofline counts them",
    }
    with open(os.path.join(out, "model-decode.truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    print(json.dumps(truth, indent=1))


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    w = {
        "norm": torch.ones(HIDDEN, device=dev, dtype=DT),
        "norm2": torch.ones(HIDDEN, device=dev, dtype=DT),
        "qkv": torch.randn(3 * HIDDEN, HIDDEN, device=dev, dtype=DT) * 0.02,
        "out": torch.randn(HIDDEN, HIDDEN, device=dev, dtype=DT) * 0.02,
        "up": torch.randn(MLP, HIDDEN, device=dev, dtype=DT) * 0.02,
        "down": torch.randn(HIDDEN, MLP, device=dev, dtype=DT) * 0.02,
    }
    x0 = torch.randn(TOKENS, HIDDEN, device=dev, dtype=DT)
    src = torch.empty(COPY_BYTES, device=dev, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    side = torch.cuda.Stream()

    # The graph replayed in the decoding stage: a small conv + SiLU, captured once.
    img = torch.randn(1, 16, 128, 128, device=dev, dtype=DT)
    conv_w = torch.randn(16, 16, 3, 3, device=dev, dtype=DT) * 0.05
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            F.silu(F.conv2d(img, conv_w, padding=1))
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        gout = F.silu(F.conv2d(img, conv_w, padding=1))

    # Ground truth, outside the profiler.
    h = torch.randn(TOKENS, HIDDEN, device=dev, dtype=DT)
    hm = torch.randn(TOKENS, MLP, device=dev, dtype=DT)
    q = torch.randn(1, HEADS, TOKENS, HEAD_DIM, device=dev, dtype=DT)
    gemms = {
        "qkv": (TOKENS, HIDDEN, 3 * HIDDEN, time_cuda(lambda: F.linear(h, w["qkv"]))),
        "out": (TOKENS, HIDDEN, HIDDEN, time_cuda(lambda: F.linear(h, w["out"]))),
        "up": (TOKENS, HIDDEN, MLP, time_cuda(lambda: F.linear(h, w["up"]))),
        "down": (TOKENS, MLP, HIDDEN, time_cuda(lambda: F.linear(hm, w["down"]))),
    }
    fp8 = hasattr(torch, "_scaled_mm") and torch.cuda.get_device_capability(0) >= (8, 9)
    fp8_gemm = None
    if fp8:
        a8 = h.to(torch.float8_e4m3fn)
        b8 = w["out"].to(torch.float8_e4m3fn)  # [N, K] row-major: b8.t() is column-major
        one = torch.tensor(1.0, device=dev)

        def fp8_gemm():
            return torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=DT)

        gemms["fp8"] = (TOKENS, HIDDEN, HIDDEN, time_cuda(fp8_gemm))
    sdpa_ms = time_cuda(lambda: F.scaled_dot_product_attention(q, q, q))
    copy_ms = time_cuda(lambda: dst.copy_(src))
    block_ms = time_cuda(lambda: block(x0, w), per_round=5)

    def step_loop():
        x = x0
        with torch.profiler.record_function("DenoisingStage"):
            for i in range(STEPS):
                with torch.profiler.record_function(f"denoising_step_{i}"):
                    # The copy waits for nothing of this step and is launched once the
                    # block's kernels are queued, so it runs beside them.
                    side.wait_stream(torch.cuda.current_stream())
                    x = block(x, w)
                    if fp8_gemm is not None:
                        fp8_gemm()
                    with torch.cuda.stream(side):
                        dst.copy_(src, non_blocking=True)
                    torch.cuda.current_stream().wait_stream(side)
                    torch.cuda.synchronize()
                time.sleep(HOST_SLEEP_S)
        with torch.profiler.record_function("DecodingStage"):
            for _ in range(3):
                g.replay()
            torch.cuda.synchronize()
        return x

    step_loop()  # warm up: cuBLAS heuristics, SDPA backend choice, allocator
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        step_loop()
        torch.cuda.synchronize()
    export(prof, os.path.join(out, "model-loop.json"))

    # The same loop with Python stacks (the mapping trace of two-trace mode: it names the
    # Python site of every kernel)...
    with torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True) as prof:
        step_loop()
        torch.cuda.synchronize()
    export(prof, os.path.join(out, "model-loop-stack.json"))

    # ...and with each step's block captured once as a CUDA graph and replayed (the formal
    # trace: its kernels have no CPU op and no Python site of their own).
    x_static = x0.clone()
    cap = torch.cuda.Stream()
    cap.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(cap):
        for _ in range(2):
            block(x_static, w)
    torch.cuda.current_stream().wait_stream(cap)
    step_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(step_graph):
        y_static = block(x_static, w)
        if fp8_gemm is not None:
            fp8_gemm()

    def graph_loop():
        with torch.profiler.record_function("DenoisingStage"):
            for i in range(STEPS):
                with torch.profiler.record_function(f"denoising_step_{i}"):
                    step_graph.replay()
                    x_static.copy_(y_static)
                    torch.cuda.synchronize()
                time.sleep(HOST_SLEEP_S)

    graph_loop()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        graph_loop()
        torch.cuda.synchronize()
    export(prof, os.path.join(out, "model-loop-graph.json"))

    record_decode(out, dev, acts)

    props = torch.cuda.get_device_properties(0)
    truth = {
        "device": torch.cuda.get_device_name(0),
        "sm_count": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "steps": STEPS,
        "tokens": TOKENS,
        "hidden": HIDDEN,
        "heads": HEADS,
        "head_dim": HEAD_DIM,
        "host_sleep_ms": HOST_SLEEP_S * 1e3,
        "copy_bytes": COPY_BYTES,
        "graph_replays": 3,
        "gemm": {
            k: {"m": m, "k": kk, "n": n, "ms": ms, "tflops": 2 * m * kk * n / (ms * 1e-3) / 1e12}
            for k, (m, kk, n, ms) in gemms.items()
        },
        "sdpa": {"ms": sdpa_ms, "tflops": 4 * HEADS * TOKENS * TOKENS * HEAD_DIM / (sdpa_ms * 1e-3) / 1e12},
        "copy": {"ms": copy_ms, "gbps": 2 * COPY_BYTES / (copy_ms * 1e-3) / 1e9},
        "block_ms": block_ms,
        "fp8": fp8,
        "note": "medians of CUDA-event timings outside the profiler; gemm tflops = 2*m*k*n / time; "
        "sdpa tflops = 4*heads*tokens^2*head_dim / time (non-causal); copy gbps counts bytes read and written",
    }
    with open(os.path.join(out, "model-loop.truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    print(json.dumps(truth, indent=1))
    del gout


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out")
