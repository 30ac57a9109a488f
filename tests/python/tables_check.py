"""The check EngramTables' tests share (in-process and in launched ranks):
ids of every kind looked up through the runtime, bitwise against
engramlab.reference_lookup. On a GPU rank the lookup runs on torch CUDA
tensors, eagerly and replayed from a torch.cuda.CUDAGraph (with fresh ids
copied in before the replay, so the graph is seen to read them)."""

import numpy as np

import engramlab


def lookup_ids(model, layer, tokens, seed):
    """[tokens, heads] int64: each head's own rows, with DEAD (-1), ids past
    the table and other negative ids among them."""
    info = engramlab.model_info(model)
    (table,) = [t for t in info["tables"] if t["layer"] == layer]
    rng = np.random.default_rng(seed)
    primes = np.asarray(table["primes"], dtype=np.int64)
    ids = np.asarray(table["head_offsets"], dtype=np.int64) + rng.integers(0, primes, size=(tokens, len(primes)))
    kind = rng.random(ids.shape)
    ids[kind < 0.05] = -1
    ids[(kind >= 0.05) & (kind < 0.08)] = table["rows"] + 3
    ids[(kind >= 0.08) & (kind < 0.1)] = -7
    return ids


def check_host(tables, model, tokens, seed):
    """A rank without a GPU: numpy in, numpy out."""
    lines = []
    for layer in tables.layers:
        ids = lookup_ids(model, layer, tokens, seed + layer)
        out = np.full(tables.output_shape(tokens, layer), 0xFFFF, dtype=np.uint16)
        tables.lookup(ids, out, layer=layer)
        np.testing.assert_array_equal(out, engramlab.reference_lookup(model, layer, ids))
        lines.append(f"{tables.placement} layer {layer} tokens {tokens}: host lookup == reference_lookup")
    return lines


def check_one_step(tables, model, tokens, seed):
    """One step of `tokens` tokens (0: an idle rank) per layer from torch
    tensors on the rank's device, made as an engine makes them: an idle
    rank's torch.zeros((0, heads), dtype=torch.int64) carries strides (1, 1)."""
    import torch

    device = torch.device(tables.device)
    lines = []
    for layer in tables.layers:
        ids_host = lookup_ids(model, layer, tokens, seed + layer)
        ids = torch.zeros(ids_host.shape, dtype=torch.int64, device=device)
        ids.copy_(torch.from_numpy(ids_host))
        out = torch.full(tables.output_shape(tokens, layer), -1, dtype=torch.int16, device=device)
        tables.lookup(ids, out, layer=layer)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        np.testing.assert_array_equal(out.cpu().numpy().view(np.uint16),
                                      engramlab.reference_lookup(model, layer, ids_host))
        lines.append(f"{tables.placement} layer {layer} step of {tokens} tokens == reference_lookup")
    return lines


def bits(tensor):
    import torch

    return tensor.view(torch.int16).cpu().numpy().view(np.uint16)


def check_gpu(tables, model, tokens, seed):
    """A GPU rank: torch CUDA tensors, eager and replayed from a CUDA graph."""
    import torch

    device = torch.device(tables.device)
    lines = []
    for layer in tables.layers:
        ids_host = lookup_ids(model, layer, tokens, seed + layer)
        ids = torch.from_numpy(ids_host).to(device)
        out = torch.empty(tables.output_shape(tokens, layer), dtype=torch.bfloat16, device=device)
        out.view(torch.int16).fill_(-1)  # a slot the lookup skips shows
        tables.lookup(ids, out, layer=layer)
        torch.cuda.synchronize(device)
        np.testing.assert_array_equal(bits(out), engramlab.reference_lookup(model, layer, ids_host),
                                      err_msg=f"eager, layer {layer}")

        # Captured on torch's capture stream (the lookup's default stream is torch's current one).
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            tables.lookup(ids, out, layer=layer)  # warm-up off the default stream, as torch asks before capture
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            tables.lookup(ids, out, layer=layer)
        fresh_host = lookup_ids(model, layer, tokens, seed + 1000 + layer)
        ids.copy_(torch.from_numpy(fresh_host))
        out.view(torch.int16).fill_(-1)
        graph.replay()
        torch.cuda.synchronize(device)
        np.testing.assert_array_equal(bits(out), engramlab.reference_lookup(model, layer, fresh_host),
                                      err_msg=f"graph replay, layer {layer}")
        lines.append(f"{tables.placement} layer {layer} tokens {tokens}: eager and CUDA graph replay == "
                     f"reference_lookup")
    return lines
