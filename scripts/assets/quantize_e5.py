#!/usr/bin/env python3
"""Quantize the float32 multilingual-e5-small graph (convert_e5.py's output) to int8.

Input: the float32 model folder (model.onnx + tokenizer files).
Output, in --out: model.onnx (int8), the tokenizer files copied byte for byte, and
memgate.json, which tells memgate how to feed the graph (below).

What changes, and why:
  * Every matrix multiplication by a weight (q, k, v, attention output, the two FFN matrices;
    72 in 12 layers) runs in int8: the weights quantized once here, symmetric, per output
    channel (w = q * scale[column], q in -127..127); the activations quantized at run time,
    symmetric, per token (each row of the input by its own max |x| / 127, stored as uint8
    around 128). Per-token scales make a text's vector independent of the texts it is batched
    with (ONNX Runtime's quantize_dynamic scales a whole batch at once: 0.996 cosine between
    the same text alone and batched) and follow f32 more closely (0.999 vs 0.995).
    The kernel is com.microsoft MatMulIntegerToFloat (u8 x s8 -> float, weight scales applied
    in the GEMM), then one multiplication by the row scales.
  * SmoothQuant (Xiao et al., 2023) before that: a few channels of the LayerNorm outputs are
    20-40x larger than the rest and would set every token's scale, so each input channel j of
    q/k/v, the FFN input and the attention output is divided by s_j = sqrt(max|x_j| / max|w_j|)
    and the weight's row j multiplied by it (same product, flatter activations). max|x_j| comes
    from the calibration texts (calibration.txt) through a float64 numpy forward pass of the
    float32 graph's own weights, so it is the same on every machine and the output stays
    pinnable. Halves the int8 error (mean 1 - cosine to float32: 7.5e-4 -> 3.3e-4). For the
    attention output the division is folded into v's weights; for the others it is one
    multiplication before the quantization (the input is also the residual, post-LayerNorm).
  * q, k and v share their input, so they are one 384 x 1152 matrix (one quantization of the
    input and one GEMM instead of three), split after.
  * bias + erf GELU becomes com.microsoft BiasGelu (one pass instead of six).
  * The word-embedding table stays 4-bit packed as convert_e5.py wrote it (54 MB of the
    ~76 MB); the rest of the float32 graph (LayerNorm, attention softmax) is unchanged.
  * Interface (memgate.json "input": "id-pairs-512"): `input_ids` carries each token id as two
    numbers, id // 512 and id % 512, and `attention_mask` repeats each token's mask twice, so
    a tokenizer with a 512-word vocabulary can deliver any of the 250,002 ids. memgate tokenizes
    with its own compact Unigram (src/embed/tokenizer.rs): the XLM-R tokenizer as loaded by the
    `tokenizers` crate holds ~290 MB of trie, more than the whole model. The output
    `sentence_embedding` [batch, 384] is already mean-pooled over the real tokens (not yet
    L2-normalized).

Deterministic: numpy rounding is exact and serialization is deterministic, so the output's
sha256 is pinned by scripts/fetch-assets like the other assets.

Usage: quantize_e5.py --model-dir F32_DIR --out INT8_DIR [--calibration calibration.txt]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS_DOMAIN = "com.microsoft"
ID_BASE = 512  # ids travel as (id // 512, id % 512)
TOKENIZER_FILES = ["tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"]
MANIFEST = {
    "memgate_model": 1,
    "input": "id-pairs-512",
    "output": "mean-pooled",
    "note": "multilingual-e5-small, int8 (per-channel weights, per-token activations, SmoothQuant); made by scripts/assets/quantize_e5.py",
}


class Builder:
    """New nodes and initializers with stable names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], out: str | None = None, domain: str = "", **attrs) -> str:
        self.count += 1
        name = out or f"q{self.count}_{op_type.lower()}"
        self.nodes.append(
            helper.make_node(op_type, inputs, [name], name=f"q{self.count}_{op_type}", domain=domain, **attrs)
        )
        return name


def quantize_weight(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per output column: w ~= q * scale."""
    scale = np.maximum(np.abs(w).max(axis=0) / 127.0, 1e-12).astype(np.float32)
    q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
    return q, scale


SMOOTH_ALPHA = 0.5
SMOOTHED = ("qkv", "ao", "fi")  # the FFN output's input (after GELU) is left as it is: no gain


def erf(x: np.ndarray) -> np.ndarray:
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf, and the calibration only
    needs maxima."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


def calibrate(model: onnx.ModelProto, tokenizer_json: Path, texts: list[str]) -> dict[str, np.ndarray]:
    """Per-channel max |x| of the input of each group of weight matrices (`l3.qkv`, `l3.ao`,
    `l3.fi`, `l3.fo`) over `texts`, from a float64 forward pass with the graph's own weights."""
    from tokenizers import Tokenizer

    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    as_f64: dict[str, np.ndarray] = {}

    def f(name: str) -> np.ndarray:
        if name not in as_f64:
            as_f64[name] = w[name].astype(np.float64)
        return as_f64[name]

    eps = next(a.f for n in model.graph.node if n.op_type == "LayerNormalization" for a in n.attribute if a.name == "epsilon")
    layers = 1 + max(int(name.split(".")[0][1:]) for name in w if name.startswith("l") and ".q.weight_t" in name)
    hidden = w["emb_ln_w"].shape[0]
    heads = hidden // 32
    nibbles, scales = w["word_nibbles"], w["word_scales"].astype(np.float64)

    def norm(x: np.ndarray, g: str, b: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * f(g) + f(b)

    tok = Tokenizer.from_file(str(tokenizer_json))
    tok.no_padding()
    tok.enable_truncation(max_length=512)
    stats: dict[str, np.ndarray] = {}

    def seen(key: str, x: np.ndarray) -> None:
        m = np.abs(x).max(0)
        stats[key] = m if key not in stats else np.maximum(stats[key], m)

    for text in texts:
        ids = np.array(tok.encode(text).ids)
        packed = nibbles[ids].reshape(len(ids), -1, 16)
        q = np.concatenate([packed & 0x0F, packed >> 4], axis=-1).astype(np.float64) - 8.0
        word = (q * scales[ids][..., None]).reshape(len(ids), hidden)
        x = norm(word + f("pos_table")[: len(ids)] + f("type0"), "emb_ln_w", "emb_ln_b")
        for layer in range(layers):
            p = f"l{layer}"
            lin = lambda v, name: v @ f(f"{name}.weight_t") + f(f"{name}.bias")  # noqa: E731
            seen(f"{p}.qkv", x)
            qh, kh, vh = (lin(x, f"{p}.{m}").reshape(len(ids), heads, -1).transpose(1, 0, 2) for m in "qkv")
            scores = qh @ kh.transpose(0, 2, 1) / np.sqrt(hidden // heads)
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            ctx = (probs @ vh).transpose(1, 0, 2).reshape(len(ids), hidden)
            seen(f"{p}.ao", ctx)
            x = norm(x + lin(ctx, f"{p}.ao"), f"{p}.aln_w", f"{p}.aln_b")
            seen(f"{p}.fi", x)
            mid = lin(x, f"{p}.fi")
            mid = 0.5 * mid * (1.0 + erf(mid / np.sqrt(2.0)))
            seen(f"{p}.fo", mid)
            x = norm(x + lin(mid, f"{p}.fo"), f"{p}.oln_w", f"{p}.oln_b")
    return stats


def smoothing(x_max: np.ndarray, weights: list[np.ndarray]) -> np.ndarray:
    """SmoothQuant's s_j = max|x_j|^a / max|w_j|^(1-a), over the rows j of every weight that reads x."""
    w_max = np.max([np.abs(w.astype(np.float64)).max(axis=1) for w in weights], axis=0)
    s = np.maximum(x_max, 1e-5) ** SMOOTH_ALPHA / np.maximum(w_max, 1e-5) ** (1.0 - SMOOTH_ALPHA)
    # Kept to 8 significant bits: another machine's BLAS may differ in the last bits of the
    # float64 statistics, never by 1/256, so the output bytes do not depend on the machine (and
    # w * s is exact in float64 before it is rounded to float32).
    mantissa, exponent = np.frexp(s)
    return np.ldexp(np.round(mantissa * 256.0) / 256.0, exponent)


def calibration_texts(path: Path) -> list[str]:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    texts = [line for line in lines if line and not line.startswith("#")]
    return [prefix + text for text in texts for prefix in ("query: ", "passage: ")]


def transform(model: onnx.ModelProto, stats: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in g.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    b = Builder()

    # ---- interface: id pairs in, the f32 graph's own names for what it read before -----------
    b.const("pairs_shape", np.array([0, -1, 2], dtype=np.int64))
    b.const("first", np.array(0, dtype=np.int64))
    b.const("second", np.array(1, dtype=np.int64))
    b.const("id_base", np.array(ID_BASE, dtype=np.int64))
    pairs = b.op("Reshape", ["input_ids", "pairs_shape"])
    high = b.op("Gather", [pairs, "first"], axis=2)
    low = b.op("Gather", [pairs, "second"], axis=2)
    b.op("Add", [b.op("Mul", [high, "id_base"]), low], out="token_ids")
    b.op("Gather", [b.op("Reshape", ["attention_mask", "pairs_shape"]), "first"], out="token_mask", axis=2)
    rename = {"input_ids": "token_ids", "attention_mask": "token_mask"}

    # ---- per-token quantization of an activation, shared by every matrix that reads it ------
    b.const("last_axis", np.array([-1], dtype=np.int64))
    b.const("tiny", np.array(1e-6, dtype=np.float32))
    b.const("inv127", np.array(1.0 / 127.0, dtype=np.float32))
    b.const("zero_f", np.array(0.0, dtype=np.float32))
    b.const("u8_mid_f", np.array(128.0, dtype=np.float32))
    b.const("u8_mid", np.array(128, dtype=np.uint8))
    b.const("one_f_q", np.array(1.0, dtype=np.float32))
    batch_shape = b.op("Shape", ["token_ids"])  # [batch, sequence]
    quantized: dict[str, tuple[str, str]] = {}

    def quantize_rows(x: str, k: int) -> tuple[str, str]:
        if x in quantized:
            return quantized[x]
        rows = b.op("Reshape", [x, b.const(f"rows_{k}_{b.count}", np.array([-1, k], dtype=np.int64))])
        scale = b.op("Mul", [b.op("Max", [b.op("ReduceMax", [b.op("Abs", [rows]), "last_axis"], keepdims=0), "tiny"]), "inv127"])
        zero_point = b.op("Cast", [b.op("Add", [b.op("Mul", [scale, "zero_f"]), "u8_mid_f"])], to=TensorProto.UINT8)
        q = b.op("QuantizeLinear", [rows, scale, zero_point], axis=0)
        quantized[x] = (q, b.op("Unsqueeze", [scale, "last_axis"]))
        return quantized[x]

    def int8_matmul(x: str, w: np.ndarray, out: str | None, smooth: np.ndarray | None = None) -> str:
        """x @ w in int8; with `smooth`, x's channels are divided by it first (rows of w times it)."""
        k, n = w.shape
        if smooth is not None:
            w = (w.astype(np.float64) * smooth[:, None]).astype(np.float32)
            if x not in quantized:
                inverse = b.const(f"smooth_{b.count}", (1.0 / smooth).astype(np.float32))
                quantized[x] = quantize_rows(b.op("Mul", [x, inverse]), k)
        q_w, w_scale = quantize_weight(w)
        tag = f"w{b.count}"
        b.const(f"{tag}_q", q_w)
        b.const(f"{tag}_scale", w_scale)
        q, row_scale = quantize_rows(x, k)
        y = b.op("MatMulIntegerToFloat", [q, f"{tag}_q", "one_f_q", f"{tag}_scale", "u8_mid"], domain=MS_DOMAIN)
        y = b.op("Mul", [y, row_scale])
        shape = b.op("Concat", [batch_shape, b.const(f"{tag}_n", np.array([n], dtype=np.int64))], axis=0)
        return b.op("Reshape", [y, shape], out=out)

    # Weights as the loop quantizes them; fold_into_v changes v's before the q/k/v group is read.
    weights = {name: numpy_helper.to_array(t) for name, t in inits.items() if name.endswith(".weight_t")}
    biases = {name: t for name, t in inits.items() if name.endswith(".bias")}

    def weight(name: str) -> np.ndarray:
        return weights[name]

    def fold_into_v(layer: str, smooth: np.ndarray) -> None:
        v, bias = f"{layer}.v.weight_t", f"{layer}.v.bias"
        weights[v] = (weights[v].astype(np.float64) / smooth[None, :]).astype(np.float32)
        scaled = (numpy_helper.to_array(biases[bias]).astype(np.float64) / smooth).astype(np.float32)
        biases[bias].CopyFrom(numpy_helper.from_array(scaled, bias))

    # ctx = softmax(.) @ v is linear in v's columns: the attention output's smoothing divides
    # them (and v's bias) instead of ctx, at no cost at run time.
    if "ao" in SMOOTHED:
        for layer_index in range(1 + max(int(n.split(".")[0][1:]) for n in weights)):
            p = f"l{layer_index}"
            fold_into_v(p, smoothing(stats[f"{p}.ao"], [weights[f"{p}.ao.weight_t"]]))

    done: set[int] = set()
    used: set[str] = set()
    out_nodes: list[onnx.NodeProto] = []
    producer = {o: n for n in g.node for o in n.output}

    def flush() -> None:
        out_nodes.extend(b.nodes)
        b.nodes.clear()

    for node in g.node:
        if id(node) in done:
            continue
        for i, name in enumerate(node.input):
            if name in rename:
                node.input[i] = rename[name]
        if node.op_type == "MatMul" and node.input[1] in inits:
            x = node.input[0]
            layer, kind = node.input[1].split(".")[:2]  # l3.q.weight_t -> l3, q
            siblings = [n for n in consumers[x] if n.op_type == "MatMul" and n.input[1] in inits]
            if len(siblings) == 3:  # q, k, v
                ws = [weight(n.input[1]) for n in siblings]
                smooth = smoothing(stats[f"{layer}.qkv"], ws)
                y = int8_matmul(x, np.concatenate(ws, axis=1), None, smooth)
                n = ws[0].shape[1]
                split = b.const(f"qkv_split_{b.count}", np.array([n, n, n], dtype=np.int64))
                b.nodes.append(
                    helper.make_node("Split", [y, split], [s.output[0] for s in siblings], axis=-1, name=f"q{b.count}_Split")
                )
                for s in siblings:
                    done.add(id(s))
                    used.add(s.input[1])
            else:
                w = weight(node.input[1])
                smooth = smoothing(stats[f"{layer}.{kind}"], [w]) if kind in SMOOTHED else None
                if kind == "ao" and smooth is not None:
                    # v's columns were divided before the loop (fold_into_v), so ctx already is.
                    int8_matmul(x, (w.astype(np.float64) * smooth[:, None]).astype(np.float32), node.output[0])
                else:
                    int8_matmul(x, w, node.output[0], smooth)
                used.add(node.input[1])
            flush()
        elif node.op_type == "Erf":
            # (x + bias) -> Mul sqrt_half -> Erf -> Add 1 -> Mul (Mul(x + bias, 0.5)): BiasGelu.
            pre = producer[node.input[0]]
            biased = producer[pre.input[0]]
            plus_one = consumers[node.output[0]][0]
            final = consumers[plus_one.output[0]][0]
            half = producer[final.input[0]]
            assert pre.op_type == "Mul" and biased.op_type == "Add" and plus_one.op_type == "Add"
            assert final.op_type == "Mul" and half.op_type == "Mul" and half.input[0] == biased.output[0]
            gone = [pre, plus_one, final, half]
            done.update(id(n) for n in gone)
            out_nodes[:] = [n for n in out_nodes if n not in (biased, pre, half)]
            b.op("BiasGelu", list(biased.input), out=final.output[0], domain=MS_DOMAIN)
            flush()
        else:
            out_nodes.append(node)

    # ---- mean pooling over the real tokens --------------------------------------------------
    b.const("sequence_axis", np.array([1], dtype=np.int64))
    b.const("one_f_pool", np.array(1.0, dtype=np.float32))
    hidden = "last_hidden_state"
    for node in out_nodes:
        for i, name in enumerate(node.output):
            if name == hidden:
                node.output[i] = "token_states"
    mask = b.op("Unsqueeze", [b.op("Cast", ["token_mask"], to=TensorProto.FLOAT), "last_axis"])  # [B, L, 1]
    summed = b.op("ReduceSum", [b.op("Mul", ["token_states", mask]), "sequence_axis"], keepdims=0)
    count = b.op("Max", [b.op("ReduceSum", [mask, "sequence_axis"], keepdims=0), "one_f_pool"])
    b.op("Div", [summed, count], out="sentence_embedding")
    flush()

    # Only what some node still reads (the GELU constants went with the fused nodes).
    read = {name for node in out_nodes for name in node.input}
    kept = [t for t in list(g.initializer) + b.inits if t.name not in used and t.name in read]
    del g.initializer[:]
    g.initializer.extend(kept)
    del g.node[:]
    g.node.extend(topological(out_nodes, {i.name for i in g.input} | {t.name for t in g.initializer}))
    hidden_size = numpy_helper.to_array(inits["emb_ln_w"]).shape[0]
    del g.input[:]
    g.input.extend(
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "pairs"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "pairs"]),
        ]
    )
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden_size])])
    del g.value_info[:]
    model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    model.producer_name = "memgate scripts/assets/quantize_e5.py"
    model.doc_string = MANIFEST["note"]
    return model


def topological(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """Nodes in an order where every input exists before it is read (keeps the given order
    where it can, so the output is deterministic)."""
    ordered, pending = [], list(nodes)
    available = set(available) | {""}
    while pending:
        rest = []
        for node in pending:
            if all(name in available for name in node.input):
                ordered.append(node)
                available.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):
            raise RuntimeError(f"graph has a cycle or a missing input near {rest[0].name}")
        pending = rest
    return ordered


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--model-dir", required=True, type=Path, help="the float32 model folder")
    ap.add_argument("--out", required=True, type=Path, help="output folder")
    ap.add_argument(
        "--calibration", type=Path, default=Path(__file__).with_name("calibration.txt"), help="calibration texts"
    )
    args = ap.parse_args(argv)
    try:
        model = onnx.load(str(args.model_dir / "model.onnx"))
        texts = calibration_texts(args.calibration)
        model = transform(model, calibrate(model, args.model_dir / "tokenizer.json", texts))
    except (OSError, KeyError, AssertionError, RuntimeError) as err:
        print(f"quantize_e5: cannot quantize {args.model_dir}: {err!r}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    data = model.SerializeToString(deterministic=True)
    tmp = args.out / "model.onnx.partial"
    tmp.write_bytes(data)
    tmp.replace(args.out / "model.onnx")
    for name in TOKENIZER_FILES:
        shutil.copyfile(args.model_dir / name, args.out / name)
    # The graph's sha256 in the manifest: memgate's model id hashes the manifest whole but samples
    # large files, and two quantizations can differ in a few bytes only.
    manifest = dict(MANIFEST, model_sha256=hashlib.sha256(data).hexdigest())
    (args.out / "memgate.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"quantize_e5: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
