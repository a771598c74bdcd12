"""Demonstrations about position tables and vectors: integer indices, learned tables, presets, the tutorial's code."""

from __future__ import annotations

from typing import cast

import numpy as np
import torch

import posenc
from posenc import presets
from posenc.analysis import properties
from posenc.analysis.demonstrations.demonstration import Demonstration, small, vector
from posenc.analysis.signals import additive_vectors, make
from posenc.core.errors import PosencError
from posenc.encoding.base import AdditiveEncoding
from posenc.reference import tutorial


def integer_index() -> Demonstration:
    """Raw integer positions: unbounded, and relative through an affine (not linear) map."""
    growth = properties.integer_index_growth(512, positions=(1000,))
    enc = make("integer_index", d_model=64)
    linear = properties.linear_relative_map(enc, 1, positions=properties.FIT_POSITIONS).residual
    affine = properties.affine_relative_map(enc, 1)
    numbers = {
        "norm_1000": float(growth.index_norm[0]),
        "token_norm": growth.token_norm,
        "linear_residual": linear,
        "affine_residual": affine,
    }
    rows = (
        (
            "||PE(1000)|| at d_model 512 vs a token embedding (N(0, 0.02^2) entries)",
            f"{numbers['norm_1000']:,.0f} vs {growth.token_norm:.2f}",
        ),
        ("least-squares PE(p+1) = M PE(p) over positions 0..255, d_model 64", small(linear)),
        ("least-squares PE(p+1) = M PE(p) + b over the same positions", small(affine)),
    )
    facts = {
        "unbounded": bool(numbers["norm_1000"] > 1000 * numbers["token_norm"]),
        "no_relative_map": affine > 1e-9,
        "no_linear_map": linear > 1e-6,
    }
    return Demonstration("integer_index", "Integer indices PE(p) = p: size and shift", rows, facts, numbers)


def tutorial_code() -> Demonstration:
    """The tutorial's NumPy class: its table is right; two of its comments name the wrong arrays."""
    d = 8
    table = tutorial.PositionalEncoding(512, d).encoding_table
    ours = additive_vectors(posenc.build("sinusoidal", dim=d), np.arange(512))
    err = float(np.abs(table - ours).max())
    dim_indices = np.arange(0, d, 2)  # the class's dim_indices ("[0, 1, 2, ..., embed_dim/2 - 1]")
    named_divisors = np.exp(dim_indices * (-np.log(10000.0) / d))  # its "divisors" ("10000^(2i/d_model)")
    rows = (
        ("max |tutorial table - posenc|, 512 positions, d_model 8", small(err)),
        ("dim_indices = np.arange(0, d, 2) (comment: [0, 1, ..., d/2 - 1])", str(dim_indices.tolist())),
        ("'divisors' as computed (comment: 10000^(2i/d) = 1, 10, 100, 1000)", vector(named_divisors)),
    )
    facts = {
        "table": err < 1e-12,
        "comments": bool(
            np.array_equal(dim_indices, np.arange(d // 2))
            and np.allclose(named_divisors, 10.0 ** np.arange(4))
        ),
    }
    return Demonstration(
        "tutorial_code", "The tutorial's PositionalEncoding class", rows, facts, {"error": err}
    )


def tutorial_usage() -> Demonstration:
    """The tutorial's usage example and "try it yourself" block (``python -m posenc.reference.tutorial``)."""
    usage = tutorial.usage_example()
    tried = tutorial.try_it_yourself()
    sims = tried["similarities"]
    numbers = {
        "pe_min": usage["pos_range"][0],
        "pe_max": usage["pos_range"][1],
        "sim_1": sims[1],
        "sim_5": sims[5],
        "sim_9": sims[9],
    }
    rows = (
        ("shapes: token_embeds, pos_encodes, final_embeds", ", ".join(str(s) for s in usage["shapes"])),
        ("position encoding range, positions 0..2", f"[{numbers['pe_min']:.3f}, {numbers['pe_max']:.3f}]"),
        (
            "cosine similarity of position 0 with 1, 5, 9 (d_model 128)",
            f"{sims[1]:.3f}, {sims[5]:.3f}, {sims[9]:.3f}",
        ),
    )
    facts = {
        "shapes": usage["shapes"] == [(1, 3, 128), (3, 128), (1, 3, 128)],
        "closer_more_similar": sims[1] > sims[5] > sims[9],
    }
    return Demonstration(
        "tutorial_usage", "The tutorial's usage example and try-it-yourself block", rows, facts, numbers
    )


def similarity_table() -> Demonstration:
    """The tutorial's printed similarity matrix vs the true cosine similarity (d_model 128)."""
    check = properties.tutorial_similarity_check()
    true = check.computed[properties.TUTORIAL_DIM][0]
    numbers = {
        "max_difference": check.max_abs_difference[properties.TUTORIAL_DIM],
        "sign_mismatches": check.sign_mismatches[properties.TUTORIAL_DIM],
        "true_7": float(true[7]),
        "closest_dim": check.closest_dim,
        "closest_difference": check.closest_difference,
    }
    rows = (
        ("printed row 0, positions 0..7", " ".join(f"{v:.2f}" for v in properties.TUTORIAL_SIMILARITY_ROW)),
        ("true row 0 at d_model 128", " ".join(f"{v:.2f}" for v in true)),
        (
            "max |printed - true|; entries of the other sign",
            f"{numbers['max_difference']:.2f}; {numbers['sign_mismatches']}",
        ),
        (
            "closest even d_model in [2, 1024]",
            f"{check.closest_dim} (still off by {check.closest_difference:.3f})",
        ),
    )
    facts = {
        "printed_table": numbers["max_difference"] < 0.01,
        "nearby_similar": bool(np.all(np.diff(true) < 0)),
    }
    return Demonstration(
        "similarity_table", "The tutorial's position similarity matrix", rows, facts, numbers
    )


def learned_table() -> Demonstration:
    """A learned table: ``max_len x d`` parameters, N(0, 0.02^2) rows, no row past ``max_len``."""
    enc = make("learned", d_model=64, num_heads=4)
    max_len, d = enc.config.max_len, enc.config.dim
    params = sum(p.numel() for p in enc.parameters())
    try:
        cast(AdditiveEncoding, enc).embed(torch.zeros(1, 1, d), positions=torch.tensor([[max_len]]))
        refused = ""
    except PosencError as exc:
        refused = str(exc)
    std = float(torch.cat([p.detach().flatten() for p in enc.parameters()]).std())
    sinusoid_params = sum(p.numel() for p in posenc.build("sinusoidal", dim=d).parameters())
    numbers = {
        "max_len": max_len,
        "dim": d,
        "parameters": params,
        "std": std,
        "sinusoid_parameters": sinusoid_params,
    }
    rows = (
        (f"parameters of a learned table, max_len {max_len}, d_model {d}", f"{params:,} (= {max_len} x {d})"),
        ("parameters of the sinusoidal encoding", str(sinusoid_params)),
        ("std of the initial table", f"{std:.4f}"),
        (f"position {max_len}", refused.split(". ")[0] or "accepted"),
    )
    facts = {
        "params": params == max_len * d,
        "sinusoid_no_params": sinusoid_params == 0,
        "init_std_002": abs(std - 0.02) < 0.002,
        "no_row_past_max": bool(refused),
    }
    return Demonstration("learned_table", "A learned position table", rows, facts, numbers)


def model_presets() -> Demonstration:
    """What well-known models use, from ``posenc.presets`` (numbers from their configs and papers)."""
    enc = {name: presets.build(name) for name in ("bert", "gpt2", "gpt3")}  # learned tables
    table_rows = {name: e.config.max_len for name, e in enc.items()}
    refuse = {}
    for name, e in enc.items():
        n = table_rows[name]
        try:
            cast(AdditiveEncoding, e).embed(torch.zeros(1, 1, e.config.dim), positions=torch.tensor([[n]]))
            refuse[name] = False
        except PosencError:
            refuse[name] = True
    kinds = {name: presets.PRESETS[name].encoding for name in presets.PRESETS}
    contexts = [p.max_positions for p in presets.PRESETS.values() if p.max_positions]
    longest = max(presets.PRESETS, key=lambda name: presets.PRESETS[name].max_positions or 0)
    numbers = {
        **{f"rows_{name}": n for name, n in table_rows.items()},
        "gpt3_parameters": sum(p.numel() for p in enc["gpt3"].parameters()),
        "longest_context": max(contexts),
    }
    rows = (
        ("learned tables: BERT, GPT-2, GPT-3 rows", ", ".join(f"{n:,}" for n in table_rows.values())),
        (
            "each refuses the position just past its table",
            ", ".join("yes" if v else "no" for v in refuse.values()),
        ),
        ("GPT-3's table: parameters", f"{numbers['gpt3_parameters']:,}"),
        (
            "original Transformer, Transformer-XL, T5",
            f"{kinds['transformer']}, {kinds['transformer-xl']}, {kinds['t5']}",
        ),
        (
            "LLaMA-1, GPT-NeoX, GPT-J, BLOOM",
            f"{kinds['llama-1']}, {kinds['gpt-neox']}, {kinds['gpt-j']}, {kinds['bloom']}",
        ),
        ("context: BERT -> the longest preset", f"{table_rows['bert']:,} -> {max(contexts):,} ({longest})"),
    )
    facts = {
        "learned_bert_gpt": all(kinds[n] == "learned" for n in ("bert", "gpt2", "gpt3")),
        "table_models": kinds["transformer"] == "sinusoidal"
        and kinds["transformer-xl"] == "transformer_xl"
        and kinds["t5"] == "t5"
        and kinds["llama-1"] == kinds["gpt-neox"] == kinds["gpt-j"] == "rope"
        and kinds["bloom"] == "alibi",
        "rows_512_1024_2048": list(table_rows.values()) == [512, 1024, 2048],
        "gpt_extrapolates_past_table": not (refuse["gpt2"] and refuse["gpt3"]),
        "context_growth": table_rows["bert"] == 512 and max(contexts) >= 100_000,
    }
    return Demonstration(
        "model_presets",
        "Position encodings of well-known models (posenc list --presets)",
        rows,
        facts,
        numbers,
    )


def video_learned_code() -> Demonstration:
    """The video script's learned-embedding forward uses ``arange(len(idx))``: the batch size, not the length."""
    d = 8
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        tok_emb, pos_emb = torch.nn.Embedding(16, d).double(), torch.nn.Embedding(32, d).double()
    idx = torch.tensor([[3, 1, 4, 1, 5]])  # (batch 1, seq 5)
    with torch.no_grad():
        as_written = tok_emb(idx) + pos_emb(torch.arange(len(idx)))  # arange(1): row 0 for every token
        intended = tok_emb(idx) + pos_emb(torch.arange(idx.shape[1]))
        same_position = float((as_written[0] - tok_emb(idx)[0] - pos_emb.weight[0]).abs().max())
        wrong = float((as_written - intended).abs().max())
        try:
            two = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
            tok_emb(two) + pos_emb(torch.arange(len(two)))
            batch2 = "ran"
        except RuntimeError as exc:
            batch2 = "RuntimeError: " + str(exc).split("\n")[0]
    rows = (
        ("batch of 1 sentence, 5 tokens: len(idx)", str(len(idx))),
        ("every token gets row 0 of the table: max |added - row 0|", small(same_position)),
        ("max |as written - arange(idx.shape[1])|", small(wrong)),
        ("batch of 2", batch2),
    )
    facts = {"as_written_ok": wrong < 1e-12}
    return Demonstration(
        "video_learned_code", "The video script's learned-embedding forward", rows, facts, {"error": wrong}
    )
