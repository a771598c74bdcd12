"""Every claim of the notes posenc was built from, with its verdict and where to see it.

Five notes: lecture notes, a video script, a notebook summary, an interview answer and a
widely shared tutorial (:data:`NOTES`). :data:`CLAIMS` lists what each says, item by item,
with a verdict:

* ``holds`` / ``corrected`` -- settled by a demonstration of
  :mod:`posenc.analysis.demonstrations` (``check``), one of whose named findings
  (``fact``) is true exactly when the note is right; ``tests/test_notes.py`` holds every
  row to it;
* ``pending`` -- a claim about trained models that ``posenc compare`` measures
  (``measure``, a key of :data:`MEASURES`); :func:`with_measurements` fills these in from
  benchmark records (:func:`posenc.results.claims.notes_measurements`) as ``holds``,
  ``contradicted`` or ``inconclusive``, decided by 95% intervals;
* ``not checked`` -- outside what posenc models (the text says why).

``truth`` may quote a demonstration's numbers as ``{key.number:format}`` (``{key.number:<1e-12}``
states rounding-level values as a bound); :func:`render_truth` fills them. docs/notes.md is :func:`markdown` (``python
scripts/update_notes_page.py``); the report, ``posenc notes`` and ``posenc show`` read
the same table.
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from types import SimpleNamespace

from posenc.analysis.demonstrations import DEMONSTRATIONS, Demonstration, run
from posenc.errors import PosencError

NOTES: dict[str, str] = {
    "lecture": "Lecture notes (Lecture 13, part 4: Positional Encoding)",
    "video": "A video script (Positional Encoding, about 10 minutes)",
    "notebook": "A notebook summary (Unveiling Positional Encoding)",
    "interview": "An interview answer (Question 21: What are positional encodings, and why are they used?)",
    "tutorial": "A widely shared tutorial (Positional Encoding: Teaching the Model Word Order)",
}

# How running text names each note.
LABELS: dict[str, str] = {
    "lecture": "the lecture notes",
    "video": "the video script",
    "notebook": "the notebook summary",
    "interview": "the interview answer",
    "tutorial": "the tutorial",
}

HOLDS, CORRECTED, PENDING, NOT_CHECKED = "holds", "corrected", "pending", "not checked"
# Verdicts of measured claims (with_measurements): decided only where a 95% interval excludes the other side.
CONTRADICTED, INCONCLUSIVE = "contradicted", "inconclusive"
VERDICTS = (HOLDS, CORRECTED, PENDING, NOT_CHECKED, CONTRADICTED, INCONCLUSIVE)
MEASURED_VERDICTS = (HOLDS, CONTRADICTED, INCONCLUSIVE)
PENDING_TEXT = "pending: measured by posenc compare"
#: The measured verdicts shipped with posenc (next to this module).
MEASURED_FILE = "notes_measured.json"

# What `posenc compare` measures to settle each pending claim.
MEASURES: dict[str, str] = {
    "extrapolation:sinusoidal": "sinusoidal (and with token embeddings x sqrt(d_model)), copy trained on n <= 8: "
    "exact match at n 10..16 at least 50%",
    "extrapolation:learned": "learned table, copy trained on n <= 8: exact match at n 10..16 at most 10%",
    "extrapolation:rope": "RoPE, copy trained on n <= 8: exact match at n 10..16 at least 90%",
    "extrapolation:t5": "T5 bias, copy trained on n <= 8: exact match at n 10..16 at least 90%",
    "extrapolation:alibi": "ALiBi, copy trained on n <= 8: exact match at n 10..16 at least 90%",
    "extrapolation:relative": "RoPE, T5 and ALiBi each above sinusoidal and learned at n 10..16 (copy)",
    "extrapolation:integer_index": "raw integer positions, copy trained on n <= 8: exact match at n 10..16 below 50%",
    "in_distribution:learned_vs_sinusoidal": "learned no more than 5 points below sinusoidal at n <= 8 (copy)",
    "open:add_vs_concat": "--variants combine=concat: adding no more than 5 points below concatenating (copy, "
    "n <= 8 and n 10..16)",
    "open:every_layer": "--variants inject=every_layer above position at the input only (copy, n <= 8 and 10..16)",
    "open:warmup": "--variants position_warmup=200 (position signal faded in over 200 steps) above the default "
    "(copy, n <= 8 and 10..16)",
    "open:scaling": "how loud the position signal is: --variants scale_embeddings=true and scaled_sinusoidal "
    "above the default (copy)",
}


@dataclass(frozen=True)
class Claim:
    id: str  # "L1": note letter + number
    note: str  # key of NOTES
    where: str  # the note's section
    says: str  # what the note claims (quoted or closely paraphrased)
    verdict: str  # one of VERDICTS
    truth: str  # what holds, may quote "{check.number:format}"
    command: str  # where to see it
    check: str | None = None  # key of posenc.analysis.demonstrations.DEMONSTRATIONS
    fact: str | None = None  # the demonstration's finding: True exactly when the note is right
    encoding: str | None = None  # registry name the claim is about (`posenc show NAME` prints it)
    measure: str | None = None  # key of MEASURES (pending claims)


def _c(
    id, note, where, says, verdict, truth, command, check=None, fact=None, encoding=None, measure=None
) -> Claim:
    """A claim settled by a demonstration (or not checked)."""
    return Claim(id, note, where, says, verdict, truth, command, check, fact, encoding, measure)


def _p(id, note, where, says, measure, truth, encoding=None) -> Claim:
    """A pending claim: a statement about trained models that ``posenc compare`` measures."""
    return Claim(id, note, where, says, PENDING, truth, "posenc compare", None, None, encoding, measure)


SHOW_NOPE, SHOW_SIN, TOUR = "posenc show nope", "posenc show sinusoidal", "python -m posenc"
PRESETS_CMD = "posenc list --presets"
EXTRAPOLATION = "A claim about trained models: measured past the training length by posenc compare."

# fmt: off
CLAIMS: tuple[Claim, ...] = (
    # ---------------------------------------------------------------- lecture notes
    _c("L1", "lecture", "1. The need for positional information",
      'Self-attention is permutation invariant: Attention("cat sat mat") = Attention("mat cat sat").',
      CORRECTED,
      "Self-attention without positions is permutation equivariant, not invariant: permuting the words "
      "permutes the outputs the same way (max |f(Px) - P f(x)| {equivariance.equivariance_gap:<1e-12}), it "
      "does not leave them unchanged (max |f(Px) - f(x)| = {equivariance.invariance_gap:.2f}).",
      SHOW_NOPE, "equivariance", "invariant", "nope"),
    _c("L2", "lecture", "1. The need for positional information",
      '"Dog bites man" vs "Man bites dog" would be the same.',
      HOLDS,
      "Each word gets the same output vector in both sentences (bidirectional attention, no positions).",
      SHOW_NOPE, "equivariance", "words_same_vectors", "nope"),
    _c("L3", "lecture", "1. The need for positional information",
      "In RNNs position is implicit; Transformers must inject it explicitly.",
      HOLDS,
      "For bidirectional attention. A causal mask alone already breaks the symmetry (word-aligned change "
      "{equivariance.causal_change:.2f} in an untrained causal model without positions), which is why "
      "decoders without position encoding (NoPE, Kazemnejad et al. 2023) can learn order.",
      SHOW_NOPE, "equivariance", "causal_sees_order", "nope"),
    _c("L4", "lecture", "2. Positional encoding methods",
      "Two main approaches: sinusoidal (original Transformer) and learned (BERT, GPT).",
      HOLDS, "Presets: transformer (sinusoidal); bert, gpt2, gpt3 (learned tables).",
      PRESETS_CMD, "model_presets", "learned_bert_gpt"),
    _c("L5", "lecture", "2-4. Key requirement, properties",
      "Each position gets a unique representation (a unique timestamp).",
      HOLDS, "Nearest pair among 4,096 positions at d_model 64: {bounded_unique.nearest_4096:.3f} apart.",
      TOUR, "bounded_unique", "sinusoid_unique", "sinusoidal"),
    _c("L6", "lecture", "3. Sinusoidal positional encoding",
      "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...): sine at even, cosine at odd dimensions.",
      HOLDS, "posenc's sinusoidal encoding is this formula.", SHOW_SIN, "worked_example", "even_sin_odd_cos", "sinusoidal"),
    _c("L7", "lecture", "3. Sinusoidal positional encoding",
      "i: dimension index (0, 1, 2, ... d_model/2).",
      CORRECTED, "i runs from 0 to d_model/2 - 1: there are d_model/2 pairs (i = 0..3 for d_model 8).",
      SHOW_SIN, "worked_example", "i_runs_to_half_d", "sinusoidal"),
    _c("L8", "lecture", "4. Why sinusoidal works",
      "Bounded: values between -1 and 1.",
      HOLDS, "Range over positions 0..4095: [{bounded_unique.min:.3f}, {bounded_unique.max:.3f}].",
      TOUR, "bounded_unique", "sinusoid_bounded", "sinusoidal"),
    _c("L9", "lecture", "4. Why sinusoidal works",
      "Relative position: PE(pos+k) can be represented as a linear function of PE(pos).",
      HOLDS, "PE(pos+k) = M_k PE(pos) with M_k one 2x2 rotation per pair; least-squares residual "
      "{linear_map.residual:<1e-9}.", TOUR, "linear_map", "sinusoid_linear", "sinusoidal"),
    _p("L10", "lecture", "4. Why sinusoidal works",
      "Extrapolation: can handle sequences longer than training.", "extrapolation:sinusoidal",
      "The formula is defined at every position; whether a model trained short uses it at longer "
      "lengths is a measurement.", "sinusoidal"),
    _c("L11", "lecture", "4. Frequency intuition",
      "Low dimensions: slow variation (like days); high dimensions: fast variation (like seconds).",
      CORRECTED, "Reversed: dimensions 0,1 are the fastest (wavelength {frequency_order.wavelength_first:.2f} "
      "positions) and the last pair the slowest ({frequency_order.wavelength_last:,.0f} at d_model 64).",
      SHOW_SIN, "frequency_order", "low_dims_slow", "sinusoidal"),
    _c("L12", "lecture", "5. Positional encoding visualization",
      "Position 1: [sin(1/f), cos(1/f), sin(1/f^2), cos(1/f^2), ...] with f = 10000^(2i/d).",
      CORRECTED, "Off by one pair: pair i divides by f^i with f = 10000^(2/d), so pair 0 divides by 1 and "
      "position 1 is [sin 1, cos 1, sin(1/f), cos(1/f), ...]; the written values are dims 2..5.",
      SHOW_SIN, "lecture_visualization", "as_written", "sinusoidal"),
    _c("L13", "lecture", "6. Learned positional embeddings",
      "nn.Embedding(max_seq_len, d_model): a trainable embedding per position, learned during training; simple.",
      HOLDS, "A learned table has max_len x d_model parameters, initialised N(0, 0.02^2).",
      "posenc show learned", "learned_table", "params", "learned"),
    _p("L14", "lecture", "6. Learned positional embeddings",
      "Often works as well as sinusoidal.", "in_distribution:learned_vs_sinusoidal",
      "Compared at the training length.", "learned"),
    _c("L15", "lecture", "6. Learned positional embeddings (cons); takeaway 4",
      "Limited to the maximum training length.",
      HOLDS, "A table has no row past max_len: posenc refuses position max_len by name.",
      "posenc show learned --positions 2000", "learned_table", "no_row_past_max", "learned"),
    _p("L16", "lecture", "6. Learned positional embeddings (cons)",
      "Cannot extrapolate to longer sequences.", "extrapolation:learned",
      "With rows past the training length (extra_rows), whether untrained rows help is a measurement.", "learned"),
    _c("L17", "lecture", "7. Adding positional encoding",
      "x = token_embedding(input_ids) + positional_encoding.",
      HOLDS, "embed(x) = x + PE; the tutorial's dog-bites-man sums are reproduced to the last printed digit.",
      SHOW_SIN, "worked_example", "step_5", "sinusoidal"),
    _c("L18", "lecture", "7. Why addition, not concatenation",
      "Addition preserves dimensionality and is efficient.",
      HOLDS, "Adding keeps d_model; concatenating needs d_model + d_pos (posenc's concat variant projects back).",
      "posenc compare --variants combine=concat", "dimension_check", "mismatch_rejected"),
    _p("L19", "lecture", "7. Why addition, not concatenation; takeaway 5",
      "Addition works empirically (better than, or as well as, concatenation).", "open:add_vs_concat",
      "An open question of the notes, measured as a variant."),
    _c("L20", "lecture", "8. Implementation",
      "The PyTorch PositionalEncoding (div_term = exp(arange(0, d, 2) * -(ln 10000 / d))).",
      HOLDS, "Equals posenc's sinusoidal (max difference {notes_code.error:<1e-12}, float64, 512 positions).",
      SHOW_SIN, "notes_code", "matches", "sinusoidal"),
    _c("L21", "lecture", "Takeaways 1-3",
      "Positional encoding is essential; without it a model cannot distinguish word order; "
      "sinusoidal uses sin/cos at different frequencies.",
      HOLDS, "For bidirectional attention (see L3 for causal masks); adding sinusoids breaks the symmetry "
      "(max |f(Px) - P f(x)| = {equivariance.sinusoidal_gap:.2f}).",
      SHOW_NOPE, "equivariance", "pe_breaks_symmetry", "nope"),
    _p("L22", "lecture", "Takeaways 6-7",
      "Sinusoidal allows extrapolation to longer sequences; both approaches work well in practice.",
      "extrapolation:sinusoidal", EXTRAPOLATION, "sinusoidal"),
    # ---------------------------------------------------------------- video script
    _c("V1", "video", "Introduction; 1. The position problem",
      "Self-attention is permutation equivariant: if we permute the input, the output permutes the same way.",
      HOLDS, "max |f(Px) - P f(x)| {equivariance.equivariance_gap:<1e-12} without positions.",
      SHOW_NOPE, "equivariance", "equivariant", "nope"),
    _c("V2", "video", "1. The position problem",
      'The model has no way to distinguish "dog bites man" from "man bites dog"; it treats all orderings the same.',
      HOLDS, "Each word's output is the same in both orders (bidirectional attention; see L3 for causal masks).",
      SHOW_NOPE, "equivariance", "words_same_vectors", "nope"),
    _c("V3", "video", "1. The position problem (visual)",
      "Show identical attention weights for permuted sequences.",
      CORRECTED, "The weights are permuted, not identical: A(Px) = P A(x) P^T (max error "
      "{equivariance.weights_permuted_gap:<1e-12}), while max |A(Px) - A(x)| = {equivariance.weights_change:.2f}.",
      SHOW_NOPE, "equivariance", "weights_identical", "nope"),
    _c("V4", "video", "2. Sinusoidal positional encoding",
      "The sinusoidal formula; frequency decreases as i increases: dims 0,1 high frequency, d-2,d-1 low.",
      HOLDS, "Wavelengths run from {frequency_order.wavelength_first:.2f} (dims 0,1) to "
      "{frequency_order.wavelength_last:,.0f} positions (last pair, d_model 64).",
      SHOW_SIN, "frequency_order", "dim0_fastest", "sinusoidal"),
    _c("V5", "video", "2. Sinusoidal positional encoding (visual)",
      "A 3-D plot of the sinusoidal encodings.",
      HOLDS, "Drawn by posenc (even dimensions as a surface over position and dimension).",
      "posenc plot sinusoidal --kind surface --d-model 64 --positions 60 -o pe3d.png"),
    _c("V6", "video", "2. Why sin and cos together",
      "PE(pos+k) = f(PE(pos)) is a linear transformation: "
      "[sin(pos+k), cos(pos+k)] = [[cos k, sin k], [-sin k, cos k]] [sin pos, cos pos].",
      HOLDS, "The matrix is right (error {shift_matrix.error:<1e-12}); it is posenc's closed-form M_k block "
      "(per pair, k becomes k / 10000^(2i/d)).", SHOW_SIN, "shift_matrix", "video_matrix", "sinusoidal"),
    _c("V7", "video", "2. Why sin and cos together",
      "The model can learn to attend to relative positions.",
      NOT_CHECKED, "The fixed map M_k exists (V6); whether a trained model uses it is not something "
      "posenc measures.", TOUR),
    _c("V8", "video", "3. Implementation",
      "The PyTorch PositionalEncoding class, and its heatmap (d_model 64, 100 positions) shows the different frequencies.",
      HOLDS, "The class equals posenc's sinusoidal (max difference {notes_code.error:<1e-12}); the heatmap is posenc's.",
      "posenc plot sinusoidal --kind heatmap --d-model 64 --positions 100 -o pe.png", "notes_code", "matches", "sinusoidal"),
    _c("V9", "video", "4. Learned vs fixed (table)",
      "Sinusoidal: original Transformer; learned: GPT, BERT; relative: Transformer-XL, T5; RoPE: LLaMA, GPT-NeoX.",
      HOLDS, "Presets transformer, gpt2, gpt3, bert, transformer-xl, t5, llama-1, gpt-neox.",
      PRESETS_CMD, "model_presets", "table_models"),
    _c("V10", "video", "4. Learned position embeddings (code)",
      "positions = torch.arange(len(idx)); return self.tok_emb(idx) + self.pos_emb(positions).",
      CORRECTED, "For a batch idx of shape (batch, seq), len(idx) is the batch size: with one sentence "
      "every token gets row 0 of the table (silently wrong), with two it fails. Use "
      "torch.arange(idx.shape[1]).", "posenc notes --demo video_learned_code", "video_learned_code", "as_written_ok", "learned"),
    _c("V11", "video", "4. Cons of learned",
      "More parameters.",
      HOLDS, "max_len x d_model: GPT-3's table alone is {model_presets.gpt3_parameters:,.0f} parameters; "
      "sinusoids have none.", "posenc build --preset gpt3", "learned_table", "params", "learned"),
    _p("V12", "video", "4. Cons of learned; modern trend",
      "Learned embeddings can't extrapolate beyond the training length; fixed encodings like RoPE can.",
      "extrapolation:learned", EXTRAPOLATION, "learned"),
    _c("V13", "video", "5. Relative position encodings",
      '"The" at position 0 vs 100 gets different representations, though its relation to neighbours is the '
      "same; relative encodings encode the offset instead.",
      HOLDS, "||PE(0) - PE(100)|| = {translation.distance:.2f}; RoPE, ALiBi and T5 score (m, n) and "
      "(m + t, n + t) identically (relative residual {translation.rope_residual:<1e-12}).",
      "posenc show rope", "translation", "relative_shift_invariant", "rope"),
    _c("V14", "video", "5. Relative position attention matrix",
      "Entry (row i, column j) is the offset i - j (0 on the diagonal, +1 below it).",
      HOLDS, "A convention (query minus key); T5 buckets j - i, ALiBi uses |i - j|.", "posenc show alibi"),
    _c("V15", "video", "5. Rotary position embedding",
      "q' = R_pos q and k' = R_pos k with R_pos a rotation matrix.",
      HOLDS, "rotate() keeps lengths: |R_m q| - |q| {rope_sign.norm_change:<1e-12}.",
      "posenc show rope", "rope_sign", "is_rotation", "rope"),
    _c("V16", "video", "5. Beautiful property",
      "(R_m q)^T (R_n k) = q^T R_{m-n} k.",
      CORRECTED, "It is q^T R_{{n-m}} k (RoFormer eq. 16): R_m^T R_n = R_{{n-m}}. With m = 2, n = 7 the score is "
      "{rope_sign.score:.4f}, q^T R_{{n-m}} k = {rope_sign.correct:.4f}, q^T R_{{m-n}} k = {rope_sign.claimed:.4f} "
      "(both of posenc's layouts).", "posenc show rope", "rope_sign", "video_sign", "rope"),
    _c("V17", "video", "5. Beautiful property",
      "The attention score depends only on the relative position.",
      HOLDS, "Shifting both positions by 100 leaves the score as it was (difference {rope_sign.correct_error:<1e-12}).",
      "posenc show rope", "rope_sign", "relative_only", "rope"),
    _p("V18", "video", "5. (visual); summary 5",
      "RoPE enables extrapolation to longer sequences.", "extrapolation:rope", EXTRAPOLATION, "rope"),
    _c("V19", "video", "6. Position encoding in practice",
      "BERT: learned, max 512; GPT-2: learned, max 1024; GPT-3: learned, max 2048; LLaMA: RoPE.",
      HOLDS, "Presets bert, gpt2, gpt3 have tables of {model_presets.rows_bert:.0f}, {model_presets.rows_gpt2:.0f} "
      "and {model_presets.rows_gpt3:.0f} rows; llama-1 is RoPE with a 2,048 context.",
      "posenc build --preset gpt3", "model_presets", "rows_512_1024_2048"),
    _p("V20", "video", "6. Position encoding in practice",
      "LLaMA's RoPE can extrapolate.", "extrapolation:rope", EXTRAPOLATION, "rope"),
    _c("V21", "video", "6. Position encoding in practice",
      "GPT-4 likely uses advanced relative position methods.",
      NOT_CHECKED, "Its architecture is unpublished.", PRESETS_CMD),
    _p("V22", "video", "6. Current best practices",
      "Fixed-length tasks: learned embeddings are fine; variable or long sequences: relative position (RoPE).",
      "extrapolation:relative", "In-distribution and long-sequence accuracy per encoding are measurements."),
    _c("V23", "video", "6. Current best practices",
      "For efficiency, combine with sparse attention.",
      NOT_CHECKED, "Sparse attention is not part of posenc.", "posenc list"),
    _c("V24", "video", "6. Context length evolution",
      "Context lengths have grown from 512 to 100K+ tokens.",
      HOLDS, "From BERT's 512 to {model_presets.longest_context:,.0f} among the presets (posenc list --presets).",
      PRESETS_CMD, "model_presets", "context_growth"),
    _c("V25", "video", "Summary 1-4",
      "Self-attention is position-blind; the sinusoidal formula; learned vs fixed trades flexibility "
      "for extrapolation; relative encodings encode offsets.",
      HOLDS, "As V1-V17 (extrapolation: V12, V18).", TOUR, "equivariance", "equivariant", "nope"),
    # ---------------------------------------------------------------- notebook summary
    _c("N1", "notebook", "Overview; 1. The paradox of parallelism",
      'Processing all tokens simultaneously loses order: "The dog bit the man" could be treated like '
      '"The man bit the dog".',
      HOLDS, "For bidirectional attention: each word's output is the same in both (see L3 for causal masks).",
      SHOW_NOPE, "equivariance", "words_same_vectors", "nope"),
    _c("N2", "notebook", "1. The paradox of parallelism",
      "Parallel processing avoids the vanishing/exploding gradients and long computation of recurrent models.",
      NOT_CHECKED, "About recurrent networks, which posenc does not model.", "posenc list"),
    _c("N3", "notebook", "1. The paradox of parallelism",
      "The permutation-invariant nature of dot-product attention: the output for \"Lion kills Tiger\" is "
      "functionally identical to \"Tiger kills Lion\", the word representations simply permuted.",
      CORRECTED, "Equivariant, as the note's own \"simply permuted\" says: outputs move with the words "
      "(max |f(Px) - P f(x)| {equivariance.equivariance_gap:<1e-12}) but are not unchanged "
      "(max |f(Px) - f(x)| = {equivariance.invariance_gap:.2f}).", SHOW_NOPE, "equivariance", "invariant", "nope"),
    _c("N4", "notebook", "2. The solution",
      "A unique PE vector per position is element-wise added to the word embedding before attention.",
      HOLDS, "embed(x) = x + PE(positions); the tutorial's sums are reproduced exactly.",
      SHOW_SIN, "worked_example", "step_5", "sinusoidal"),
    _p("N5", "notebook", "2. Why element-wise addition",
      "Addition lets the network distinguish and use both the meaning and the position.", "open:add_vs_concat",
      "Against concatenation, an open question measured as a variant."),
    _c("N6", "notebook", "2. Why not integer indices",
      "Raw integer indices have unbounded magnitudes that destabilise training.",
      HOLDS, "||PE(1000)|| = {integer_index.norm_1000:,.0f} at d_model 512 against {integer_index.token_norm:.2f} "
      "for a token embedding.", TOUR, "integer_index", "unbounded", "integer_index"),
    _c("N7", "notebook", "2. Why not integer indices",
      "Simple integer positions do not intrinsically convey relative distances.",
      CORRECTED, "PE(p+k) = PE(p) + k exactly: an affine map (least-squares residual "
      "{integer_index.affine_residual:<1e-12}), as fixed as the sinusoids' rotation, though no linear map without "
      "the offset fits ({integer_index.linear_residual:.2g} over positions 0..255). Their size rules them out.",
      TOUR, "integer_index", "no_relative_map", "integer_index"),
    _p("N8", "notebook", "2. Why not integer indices",
      "They don't generalise well to unseen sequence lengths.", "extrapolation:integer_index",
      "Positions past training are values the model never saw; a measurement.", "integer_index"),
    _c("N9", "notebook", "3. Sinusoidal positional encoding",
      "Alternating sine and cosine of varying frequencies; i from 0 to d_model/2 - 1.",
      HOLDS, "As posenc show sinusoidal prints.", SHOW_SIN, "worked_example", "even_sin_odd_cos", "sinusoidal"),
    _c("N10", "notebook", "3. Why sine and cosine",
      "Bounded values between -1 and +1 irrespective of sequence length.",
      HOLDS, "Range over positions 0..4095: [{bounded_unique.min:.3f}, {bounded_unique.max:.3f}].",
      TOUR, "bounded_unique", "sinusoid_bounded", "sinusoidal"),
    _c("N11", "notebook", "3. Why sine and cosine",
      "PE(pos + k) can be represented as a linear function of PE(pos) and PE(k).",
      HOLDS, "Bilinear: each pair is sin(a+b) = sin a cos b + cos a sin b, from the entries of PE(pos) and "
      "PE(k) (error {bilinear.error:<1e-12}); for fixed k, linear in PE(pos).",
      SHOW_SIN, "bilinear", "bilinear", "sinusoidal"),
    _p("N12", "notebook", "3. Why sine and cosine",
      "This lets the model generalise about relative distances even for sequences much longer than in training.",
      "extrapolation:sinusoidal", EXTRAPOLATION, "sinusoidal"),
    _c("N13", "notebook", "3. Why sine and cosine",
      "The range of wavelengths encodes both nearby and distant relationships.",
      HOLDS, "Wavelengths from {wavelengths.cycle_0:.2f} to {wavelengths.longest_512:,.0f} positions at d_model 512.",
      SHOW_SIN, "wavelengths", "dim0_cycle_about_6", "sinusoidal"),
    _c("N14", "notebook", "3. Uniqueness and non-ambiguity",
      "Each position receives a truly unique vector.",
      HOLDS, "Nearest pair among 4,096 positions: {bounded_unique.nearest_4096:.3f} apart (d_model 64).",
      TOUR, "bounded_unique", "sinusoid_unique", "sinusoidal"),
    _c("N15", "notebook", "3. Deterministic and non-learned; learned PE",
      "Sinusoids add no parameters; a learned PE is a randomly initialised trainable matrix with more parameters.",
      HOLDS, "0 parameters vs max_len x d_model ({learned_table.parameters:,.0f} at 1024 x 64), N(0, 0.02^2).",
      "posenc list", "learned_table", "sinusoid_no_params", "learned"),
    _p("N16", "notebook", "3. Learned PE: trade-offs",
      "Learned PEs may generalise less well beyond the training lengths than sinusoids.",
      "extrapolation:learned", EXTRAPOLATION, "learned"),
    _c("N17", "notebook", "4. Dimensionality matching",
      "The positional encoding must have the same dimensionality as the word embedding.",
      HOLDS, "posenc refuses a mismatch by name: \"x has feature size 6 but the encoding has dim=8\".",
      "posenc notes --demo dimension_check", "dimension_check", "mismatch_rejected", "sinusoidal"),
    _c("N18", "notebook", "4. Step-by-step generation; the augmented input",
      "Each dimension is filled by the sine or cosine formula; the sum word + PE is the input to self-attention.",
      HOLDS, "The worked example, steps 1-5.", SHOW_SIN, "worked_example", "steps_1_to_4", "sinusoidal"),
    _c("N19", "notebook", "4. Flow through the Transformer",
      "With positions added, attention can distinguish order-dependent relationships.",
      HOLDS, "Adding sinusoids makes max |f(Px) - P f(x)| = {equivariance.sinusoidal_gap:.2f} (from ~1e-16).",
      TOUR, "equivariance", "pe_breaks_symmetry", "sinusoidal"),
    _c("N20", "notebook", "The ultimate impact",
      "Position helps disambiguation, syntax, coreference and long-range dependencies.",
      NOT_CHECKED, "Claims about trained language models; posenc's benchmark uses small synthetic tasks "
      "and a byte-level model.", "posenc compare"),
    # ---------------------------------------------------------------- interview answer
    _c("I1", "interview", "Human answer; AI answer",
      "Self-attention lacks inherent order awareness; encodings add sequence-order information.",
      HOLDS, "Equivariant without positions; see L3 for causal masks.", SHOW_NOPE, "equivariance", "equivariant", "nope"),
    _c("I2", "interview", "The problem",
      '"The cat chased the mouse" and "Mouse the chased cat the" would produce identical attention patterns.',
      CORRECTED, "The pattern is permuted, not identical: A(Px) = P A(x) P^T, and max |A(Px) - A(x)| = "
      "{equivariance.weights_change:.2f}. What is identical is each word's output.",
      SHOW_NOPE, "equivariance", "weights_identical", "nope"),
    _c("I3", "interview", "Sinusoidal: formula and implementation",
      "The sinusoidal formula and get_positional_encoding(seq_len, d_model).",
      HOLDS, "Equal to posenc's sinusoidal (max difference {notes_code.error:<1e-12}).", SHOW_SIN, "notes_code", "matches", "sinusoidal"),
    _c("I4", "interview", "Sinusoidal: properties",
      "Unique encoding per position; similar positions have similar encodings; differentiable.",
      HOLDS, "Cosine similarity to position 0 at d_model 128: {tutorial_usage.sim_1:.3f} (1), "
      "{tutorial_usage.sim_5:.3f} (5), {tutorial_usage.sim_9:.3f} (9).",
      "python -m posenc.reference.tutorial", "tutorial_usage", "closer_more_similar", "sinusoidal"),
    _p("I5", "interview", "Sinusoidal: properties; learned vs sinusoidal table",
      "Extrapolation: sinusoidal can handle longer sequences (good); learned is limited.",
      "extrapolation:sinusoidal", EXTRAPOLATION, "sinusoidal"),
    _c("I6", "interview", "Learned vs sinusoidal table",
      "Parameters: 0 vs d_model x max_seq_len; training not required vs required; memory low vs higher.",
      HOLDS, "{learned_table.sinusoid_parameters:.0f} vs {learned_table.parameters:,.0f} at d_model 64, max_len 1024.",
      "posenc list", "learned_table", "params", "learned"),
    _c("I7", "interview", "Types of positional encodings",
      "Absolute: sinusoidal, learned, hybrid. Relative: T5 buckets; RoPE.",
      HOLDS, "All registered: sinusoidal, learned, hybrid, t5, rope.", "posenc list", "citations", "registry_cites"),
    _c("I8", "interview", "Types of positional encodings",
      "Shaw et al. (2018): relative position bias in attention.",
      CORRECTED, "Shaw et al. learn relative vectors added to the keys (and values); the score term q . a_ij "
      "changes with the query (by {shaw_not_bias.change:.1f} here), so it is not a bias. T5 is the bias.",
      "posenc show shaw", "shaw_not_bias", "is_bias", "shaw"),
    _c("I9", "interview", "Relative positional encoding: motivation",
      '"The cat" should be processed similarly regardless of sentence position.',
      HOLDS, "Relative encodings score (m, n) and (m + t, n + t) alike (T5 residual {translation.t5_residual:<1e-12}).",
      "posenc show t5", "translation", "relative_shift_invariant", "t5"),
    _p("I10", "interview", "Relative positional encoding: motivation",
      "Better generalisation to different sequence lengths.", "extrapolation:relative", EXTRAPOLATION),
    _c("I11", "interview", "T5 relative attention bias (code)",
      "Simplified T5 bias: relative_positions = arange(seq_len)[:, None] - arange(seq_len)[None, :], then "
      "relative_position_to_bucket(...) and nn.Embedding(num_buckets, num_heads).",
      CORRECTED, "It cannot run: relative_position_to_bucket, nn and num_heads are never defined. And T5 buckets "
      "j - i (key minus query), not i - j: in a causal decoder the snippet's sign puts keys 0..10 of query 10, "
      "which T5 spreads over {t5_snippet.t5_distinct:.0f} buckets, into {t5_snippet.snippet_distinct:.0f}, blind to "
      "distance; bidirectionally it transposes the bias.", "posenc show t5", "t5_snippet", "sign_matches_t5", "t5"),
    _c("I12", "interview", "Rotary position embedding",
      "RoPE rotates token embeddings based on their position.",
      CORRECTED, "RoPE rotates each attention layer's queries and keys; the token embeddings are not touched "
      "(posenc kind rotary, hook rotate(q, k)).", "posenc show rope", "rope_formula", "rotates_token_embeddings", "rope"),
    _c("I13", "interview", "Rotary position embedding",
      "RoPE(x, pos) = x * cos(pos * theta) + rotate(x) * sin(pos * theta); maintains relative position naturally.",
      HOLDS, "With rotate = rotate_half it equals posenc's RoPE (error {rope_formula.error:<1e-12}).",
      "posenc show rope", "rope_formula", "formula", "rope"),
    _p("I14", "interview", "Rotary position embedding; LLaMA",
      "RoPE: better handling of long sequences, improved extrapolation; LLaMA: superior long-sequence performance.",
      "extrapolation:rope", EXTRAPOLATION, "rope"),
    _c("I15", "interview", "ALiBi",
      "attention_scores + alibi_bias with alibi_bias = -m * |i - j|; no position embeddings needed.",
      HOLDS, "posenc's bidirectional ALiBi is -m_h |i - j| with slopes 2^(-8h/H) (error {alibi_formula.error:<1e-12}). "
      "The later snippet leaves alibi_slopes undefined: posenc.build(\"alibi\", num_heads=8).slopes.",
      "posenc show alibi", "alibi_formula", "formula", "alibi"),
    _p("I16", "interview", "ALiBi",
      "Excellent extrapolation to longer sequences.", "extrapolation:alibi", EXTRAPOLATION, "alibi"),
    _c("I17", "interview", "Sandwich position encoding",
      "Add positional encoding at multiple layers, not just the input layer.",
      CORRECTED, "Sandwich (Chi et al. 2023) is a parameter-free attention bias: the inner product of two "
      "sinusoidal vectors, p_i . p_j, scaled per head; it adds nothing to the embeddings.",
      "posenc show sandwich", "sandwich", "adds_pe_at_layers", "sandwich"),
    _p("I18", "interview", "Sandwich position encoding",
      "Position information at every layer gives better position awareness throughout the model.",
      "open:every_layer", "An open question of the notes, measured as a variant (inject=every_layer)."),
    _c("I19", "interview", "Complex-valued encodings",
      "Complex numbers for position: natural rotation properties.",
      HOLDS, "Registered as complex_order (Wang et al. 2020): a shift multiplies each entry by a unit phase.",
      "posenc show complex_order"),
    _c("I20", "interview", "BERT",
      "Learned absolute positions, max 512 tokens, cannot extrapolate beyond the training length.",
      HOLDS, "Preset bert: {model_presets.rows_bert:.0f} rows and no row past them.",
      "posenc build --preset bert", "model_presets", "rows_512_1024_2048", "learned"),
    _c("I21", "interview", "GPT-2/3",
      "Learned absolute positions with better extrapolation than BERT.",
      CORRECTED, "GPT-2 and GPT-3 tables have {model_presets.rows_gpt2:.0f} and {model_presets.rows_gpt3:.0f} rows "
      "and, like BERT's, none past them: a longer table, not extrapolation.",
      "posenc build --preset gpt3", "model_presets", "gpt_extrapolates_past_table", "learned"),
    _c("I22", "interview", "T5",
      "Relative position bias in attention, no explicit position embeddings.",
      HOLDS, "Preset t5: a bias encoding, one bucketed table per stack.", "posenc build --preset t5",
      "model_presets", "table_models", "t5"),
    _p("I23", "interview", "T5",
      "Excellent length extrapolation.", "extrapolation:t5", EXTRAPOLATION, "t5"),
    _c("I24", "interview", "Evaluation: probing tasks",
      'Measure the model difference between "The quick brown fox jumps" and "brown quick The fox jumps".',
      HOLDS, "posenc runs this probe (model_difference is left undefined in the snippet). Word-aligned output "
      "change of untrained models: {probe.nope_change:<1e-12} without positions, {probe.sinusoidal_change:.2f} with sinusoids.",
      "posenc report -o report/", "probe", "probe_separates"),
    _c("I25", "interview", "Evaluation: length extrapolation",
      "Train on short sequences, test on long ones.",
      HOLDS, "What posenc compare does, at small scale (train n <= 8 / L = 64, test at 2x and 4x).", "posenc compare"),
    _c("I26", "interview", "Visualization techniques",
      "Plot encoding vectors, attention patterns and similarity matrices.",
      HOLDS, "posenc plot: heatmap, surface, waves, similarity, attention, ...",
      "posenc plot sinusoidal --kind similarity -o sim.png"),
    _c("I27", "interview", "Common issues: position saturation",
      "Very long sequences may have similar position encodings; use hierarchical encodings.",
      CORRECTED, "Not for sinusoids in float64: the nearest pair among 4,096 positions "
      "({bounded_unique.nearest_4096:.3f}) is as far apart as among 128 ({bounded_unique.nearest_128:.3f}). What runs "
      "out is a learned table's rows; posenc's hierarchical encoding covers that.",
      TOUR, "bounded_unique", "sinusoid_saturates", "hierarchical"),
    _p("I28", "interview", "Common issues: training instability",
      "Large position encodings can destabilise training: use proper initialisation and scaling.",
      "open:scaling", "An open question of the notes, measured with scaled_sinusoidal and scale_embeddings."),
    _p("I29", "interview", "Common issues: training instability",
      "Gradual position encoding introduction.", "open:warmup",
      "An open question of the notes, measured as a variant (position_warmup)."),
    _c("I30", "interview", "Research citations",
      "Vaswani et al. 2017; Shaw et al. 2018; Su et al. 2021 (RoFormer); Press et al. 2022 (ALiBi).",
      HOLDS, "The registry cites the same papers.", "posenc list", "citations", "registry_cites"),
    # ---------------------------------------------------------------- tutorial
    _c("T1", "tutorial", "The problem: position blindness",
      "[E(dog), E(bites), E(man)] and [E(man), E(bites), E(dog)] hold the same embeddings in a different order: "
      "a model using only attention would see them as the same.",
      HOLDS, "Each word gets the same output in both (max |f(Px) - P f(x)| {equivariance.equivariance_gap:<1e-12}).",
      SHOW_NOPE, "equivariance", "words_same_vectors", "nope"),
    _c("T2", "tutorial", "Sinusoidal positional encoding",
      "final_embedding = token_embedding + positional_encoding; like a clock, slow and fast hands together "
      "identify each position.",
      HOLDS, "The minute hand is dimension 0 (wavelength {frequency_order.wavelength_first:.2f}).",
      SHOW_SIN, "frequency_order", "dim0_fastest", "sinusoidal"),
    _c("T3", "tutorial", "Breaking down the formula",
      "10000^(2i/d_model) creates wavelengths from 2 pi to 10000 * 2 pi.",
      CORRECTED, "The longest is 2 pi 10000^((d-2)/d): {wavelengths.longest_8:,.0f} at d_model 8, "
      "{wavelengths.longest_128:,.0f} at 128, {wavelengths.longest_512:,.0f} at 512; 10000 * 2 pi = "
      "{wavelengths.limit:,.0f} is only approached as d_model grows.",
      SHOW_SIN, "wavelengths", "max_is_10000_2pi", "sinusoidal"),
    _c("T4", "tutorial", "Step-by-step numeric example, steps 1-4",
      "Divisors 1, 10, 100, 1000; angles pos / divisor; the 4 x 8 PE matrix to 3 decimals.",
      HOLDS, "Reproduced exactly (max |printed - recomputed| = {worked_example.pe_rounding_error:g}).",
      SHOW_SIN, "worked_example", "steps_1_to_4", "sinusoidal"),
    _c("T5", "tutorial", "Step 5: add to token embeddings",
      'Made-up embeddings for "dog bites man" plus PE: [0.500, 1.300, 0.800, 1.100, ...], '
      "[1.041, 1.240, 0.500, 1.895, ...], [1.809, -0.316, 0.799, 1.280, ...].",
      HOLDS, "Reproduced exactly (max |printed - recomputed| = {worked_example.sum_rounding_error:g}); \"dog\" at "
      "position 0 differs from \"dog\" at position 2.", SHOW_SIN, "worked_example", "step_5", "sinusoidal"),
    _c("T6", "tutorial", "Why sines and cosines: unique patterns",
      "Position 1: [0.84, 0.54, 0.10, 0.99, 0.01, 1.00, ...]; position 2: [0.91, -0.42, 0.20, 0.98, 0.02, 1.00, ...].",
      CORRECTED, "One digit: cos(0.1) = {worked_example.cos_01:.6f} rounds to 1.00, not 0.99; the rest hold.",
      SHOW_SIN, "worked_example", "fingerprints_2dp", "sinusoidal"),
    _c("T7", "tutorial", "Relative position through linear transformation",
      "PE(pos+k) is a linear function of PE(pos) (the sum formulas); the model can look back or ahead k "
      "positions by a matrix multiplication.",
      HOLDS, "M_k exists and is fixed (least-squares residual {linear_map.residual:<1e-9}).",
      TOUR, "linear_map", "sinusoid_linear", "sinusoidal"),
    _c("T8", "tutorial", "Bounded values",
      "Values stay in [-1, 1]; no explosion for long sequences.",
      HOLDS, "Range over positions 0..4095: [{bounded_unique.min:.3f}, {bounded_unique.max:.3f}].",
      TOUR, "bounded_unique", "sinusoid_bounded", "sinusoidal"),
    _c("T9", "tutorial", "Generalization beyond training length",
      "The function is defined for any position: PE[1000] = compute_sinusoidal(1000).",
      HOLDS, "posenc encodes position 1,000,000 as well; the tutorial's own class, built for 512 positions, refuses "
      "1001 (use posenc.build(\"sinusoidal\")).", SHOW_SIN, "defined_everywhere", "formula_defined", "sinusoidal"),
    _p("T10", "tutorial", "Generalization beyond training length",
      "Sinusoidal encoding works for sequences longer than seen during training.",
      "extrapolation:sinusoidal", EXTRAPOLATION, "sinusoidal"),
    _c("T11", "tutorial", "Code implementation",
      "The PositionalEncoding class (src/layers.py) computes the sinusoidal table.",
      HOLDS, "Runnable as posenc.reference.tutorial.PositionalEncoding; equal to posenc's sinusoidal (max "
      "difference {tutorial_code.error:<1e-12}).", "python -m posenc.reference.tutorial", "tutorial_code", "table", "sinusoidal"),
    _c("T12", "tutorial", "Code implementation (comments)",
      '"dim_indices = [0, 1, 2, ..., embed_dim/2 - 1]"; "Compute the frequency divisors: 10000^(2i/d_model)".',
      CORRECTED, "np.arange(0, d, 2) is [0, 2, ..., d - 2] (the values 2i), and the array named divisors holds "
      "10000^(-2i/d), the reciprocals (1, 0.1, 0.01, 0.001 at d 8). The table is right: it multiplies.",
      "posenc notes --demo tutorial_code", "tutorial_code", "comments", "sinusoidal"),
    _c("T13", "tutorial", "Usage example",
      "Shapes (1, 3, 128), (3, 128) and (1, 3, 128); printed value ranges.",
      HOLDS, "python -m posenc.reference.tutorial prints them; the position range is "
      "[{tutorial_usage.pe_min:.3f}, {tutorial_usage.pe_max:.3f}].",
      "python -m posenc.reference.tutorial", "tutorial_usage", "shapes", "sinusoidal"),
    _c("T14", "tutorial", "Visualization: sinusoidal patterns",
      "Dimension 0: sine, period about 2 pi; dimension 126 (d_model 128): sine with period about 10000 x 2 pi, "
      "drawn as a flat line at +1 over positions 0..400.",
      CORRECTED, "Dimension 126 is sin(pos / 10000^(126/128)): 0 at position 0 and only "
      "{dimension_126.max_abs_126:.3f} at 400; the line at +1 is its cosine, dimension 127. Its period is "
      "{dimension_126.period_126:,.0f} positions, not 10000 x 2 pi = {dimension_126.limit:,.0f}.",
      SHOW_SIN, "dimension_126", "drawn_at_plus_one", "sinusoidal"),
    _c("T15", "tutorial", "Heatmap of position encodings",
      "20 positions x 512 dims: the left (low) dimensions change fast, the right ones barely; dim 0 cycles "
      "in about 6 positions, dim 510 needs about 60,000.",
      HOLDS, "Dim 510: divisor {wavelengths.divisor_510:,.0f}, {wavelengths.angle_510:.3g} radians per position, "
      "{wavelengths.cycle_510:,.0f} positions per cycle.",
      "posenc plot sinusoidal --kind heatmap --positions 20 --d-model 512 -o pe.png", "wavelengths",
      "dim510_about_60000", "sinusoidal"),
    _c("T16", "tutorial", "Position similarity matrix",
      "Cosine similarity of positions 0..7: 1.00, .76, .41, .04, -.28, -.52, -.67, -.73 (row 0).",
      CORRECTED, "At d_model 128 the true row is 1.00 ... {similarity_table.true_7:.2f} (slow dimensions keep it "
      "high); the printed one is off by up to {similarity_table.max_difference:.2f}, and no even d_model up to 1024 "
      "reproduces it.", "posenc report -o report/", "similarity_table", "printed_table", "sinusoidal"),
    _c("T17", "tutorial", "Position similarity matrix; try it yourself",
      "Nearby positions have higher similarity; distant positions lower.",
      HOLDS, "Position 0 vs 1, 5, 9: {tutorial_usage.sim_1:.3f}, {tutorial_usage.sim_5:.3f}, "
      "{tutorial_usage.sim_9:.3f}.", "python -m posenc.reference.tutorial", "tutorial_usage",
      "closer_more_similar", "sinusoidal"),
    _c("T18", "tutorial", "Learned positional embeddings",
      "A table np.random.randn(max_seq_len, embed_dim) * 0.02, like BERT and GPT-2; cannot go past max_seq_len.",
      HOLDS, "posenc's learned table starts N(0, 0.02^2) (std {learned_table.std:.4f}) and refuses position max_len.",
      "posenc show learned", "learned_table", "init_std_002", "learned"),
    _c("T19", "tutorial", "Rotary position embedding",
      "Used in LLaMA and GPT-NeoX; rotates queries and keys: x * cos + rotate(x) * sin; encodes relative "
      "positions naturally.",
      HOLDS, "Equals posenc's RoPE (error {rope_formula.error:<1e-12}); presets llama-1, gpt-neox.",
      "posenc show rope", "rope_formula", "formula", "rope"),
    _c("T20", "tutorial", "ALiBi",
      "Used in BLOOM: bias -m * |pos_query - pos_key| with a head-specific slope; only affects attention, "
      "not the embeddings.",
      HOLDS, "Preset bloom; posenc's ALiBi is a bias with slopes 2^(-8h/H) (error {alibi_formula.error:<1e-12}).",
      "posenc show alibi", "alibi_formula", "formula", "alibi"),
    _p("T21", "tutorial", "Alternative approaches; comparison table",
      "Length extrapolation: sinusoidal good, learned poor, RoPE excellent (\"infinite\"), ALiBi excellent.",
      "extrapolation:relative", "Measured per encoding at 2x and 4x the training length."),
    _c("T22", "tutorial", "Comparison table",
      "Computational cost: sinusoidal low (precomputed), learned low, RoPE medium, ALiBi low.",
      NOT_CHECKED, "posenc's speed races (benchmarks/ in its repository) time RoPE and ALiBi against other "
      "libraries, not the encodings against each other.", "python benchmarks/run_speed.py --quick"),
    _c("T23", "tutorial", "Comparison table",
      "Used in: original Transformer (sinusoidal), BERT and GPT-2 (learned), LLaMA and GPT-J (RoPE), BLOOM (ALiBi).",
      HOLDS, "Presets transformer, bert, gpt2, llama-1, gpt-j, bloom.", PRESETS_CMD, "model_presets", "table_models"),
    _c("T24", "tutorial", "Try it yourself",
      "python -m src.layers runs the layers demo; the Python block prints shapes and similarities.",
      HOLDS, "python -m posenc.reference.tutorial runs the usage example and this block.",
      "python -m posenc.reference.tutorial", "tutorial_usage", "shapes", "sinusoidal"),
    _c("T25", "tutorial", "References",
      "Vaswani et al. 2017; RoFormer (Su et al. 2021); ALiBi (Press et al. 2022).",
      HOLDS, "The registry cites the same papers.", "posenc list", "citations", "registry_cites"),
)
# fmt: on


def claims(
    *,
    note: str | None = None,
    verdict: str | None = None,
    encoding: str | None = None,
    measured: bool = False,
) -> tuple[Claim, ...]:
    """:data:`CLAIMS` (``measured``: with the shipped measurements, :func:`measured_claims`),
    optionally only one note's, one verdict's or one encoding's."""
    if note is not None and note not in NOTES:
        raise PosencError(f"note must be one of {', '.join(NOTES)}, got {note!r}")
    if verdict is not None and verdict not in VERDICTS:
        raise PosencError(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
    return tuple(
        c
        for c in (measured_claims() if measured else CLAIMS)
        if (note is None or c.note == note)
        and (verdict is None or c.verdict == verdict)
        and (encoding is None or c.encoding == encoding)
    )


def checks_of(selected: Iterable[Claim]) -> list[str]:
    """Demonstrations the claims need: their ``check`` and every ``{key.number}`` their text quotes."""
    keys: list[str] = []
    for c in selected:
        keys += [c.check] if c.check else []
        keys += [f.split(".")[0] for _, f, _, _ in string.Formatter().parse(c.truth) if f]
    return list(dict.fromkeys(keys))


class _Number(float):
    """A demonstration's number; the format spec ``<1e-12`` prints "< 1e-12" for rounding-level values.

    Rounding noise (1.1e-16 here, 2.2e-16 on another machine) is stated as a bound, so the
    generated page does not depend on the machine that wrote it.
    """

    def __format__(self, spec: str) -> str:
        if spec.startswith("<"):
            bound = float(spec[1:])
            return f"< {spec[1:]}" if abs(self) < bound else format(float(self), ".2g")
        return format(float(self), spec)


def render_truth(claim: Claim, demos: Mapping[str, Demonstration]) -> str:
    """``claim.truth`` with its ``{key.number:format}`` fields filled from ``demos``."""
    spaces = {
        key: SimpleNamespace(**{k: _Number(v) for k, v in demo.numbers.items()})
        for key, demo in demos.items()
    }
    return claim.truth.format(**spaces)


def verdict_text(claim: Claim) -> str:
    return PENDING_TEXT if claim.verdict == PENDING else claim.verdict


def with_measurements(
    measured: Mapping[str, tuple[str, str]], selected: Iterable[Claim] = CLAIMS, *, command: str | None = None
) -> tuple[Claim, ...]:
    """The claims with pending rows settled: ``measured[measure] = (verdict, truth)``.

    The verdict is one of :data:`MEASURED_VERDICTS` (``holds``, ``contradicted``,
    ``inconclusive``), or ``pending`` with a text saying why nothing was measured.
    Pending claims whose ``measure`` is not in ``measured`` stay as they are; ``command``
    (the run that measured them) replaces the settled rows' ``posenc compare``.
    """
    out = []
    for c in selected:
        if c.verdict == PENDING and c.measure is not None and c.measure in measured:
            verdict, truth = measured[c.measure]
            if verdict not in (*MEASURED_VERDICTS, PENDING):
                raise PosencError(
                    f"a measured verdict must be one of {', '.join(MEASURED_VERDICTS)} (or pending), "
                    f"got {verdict!r} for {c.measure}"
                )
            truth = truth.replace("{", "{{").replace("}", "}}")  # quoted as is by render_truth
            c = replace(c, verdict=verdict, truth=truth, command=command or c.command)
        out.append(c)
    return tuple(out)


def shipped_measurements() -> tuple[str, dict[str, tuple[str, str]]]:
    """``(command, {measure: (verdict, text)})`` shipped with posenc (:data:`MEASURED_FILE`,
    written by ``python scripts/update_notes_page.py --results DIR``); ``("", {})`` if none."""
    try:
        text = resources.files("posenc.analysis").joinpath(MEASURED_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return "", {}
    data = json.loads(text)
    return data["command"], {k: (v[0], v[1]) for k, v in data["measurements"].items()}


def measured_claims(selected: Iterable[Claim] = CLAIMS) -> tuple[Claim, ...]:
    """The claims with the shipped measurements filled in (what the page, ``posenc notes``,
    the report and the tour show)."""
    command, measured = shipped_measurements()
    return with_measurements(measured, selected, command=command or None)


def counts(selected: Iterable[Claim] = CLAIMS) -> dict[str, int]:
    """How many claims have each verdict."""
    found = {v: 0 for v in VERDICTS}
    for c in selected:
        found[c.verdict] += 1
    return found


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary_line(selected: Iterable[Claim]) -> str:
    """``"N claims: a hold, b corrected, ..."`` (measured verdicts only when there are any)."""
    selected = tuple(selected)
    total = counts(selected)
    parts = [f"{total[HOLDS]} hold", f"{total[CORRECTED]} corrected"]
    parts += [f"{total[v]} {v}" for v in (CONTRADICTED, INCONCLUSIVE) if total[v]]
    parts += [f"{total[PENDING]} pending (measured by `posenc compare`)", f"{total[NOT_CHECKED]} not checked"]
    return f"{len(selected)} claims: {', '.join(parts)}"


def markdown(
    demos: Mapping[str, Demonstration] | None = None,
    selected: Iterable[Claim] | None = None,
    measured_by: str | None = None,
) -> str:
    """docs/notes.md: every claim, note by note, with verdict, what holds and the command to see it.

    ``selected`` defaults to :func:`measured_claims` (the shipped measurements) and
    ``measured_by`` to the command that made them: the ``posenc compare`` run whose
    records settled the measured claims, named on the page.
    """
    if selected is None:
        selected = measured_claims()
        measured_by = measured_by or shipped_measurements()[0] or None
    selected = tuple(selected)
    demos = demos if demos is not None else run(checks_of(selected))
    lines = [
        "# The notes, claim by claim",
        "",
        "posenc was built from five notes on positional encoding that students and teachers pass",
        "around. This page lists what each of them claims, item by item, with a verdict and the",
        "command that shows it. It is generated from `posenc.analysis.notes.CLAIMS` by",
        "`python scripts/update_notes_page.py`; `tests/test_notes.py` recomputes every",
        "demonstration and fails when a verdict no longer matches it. The same table is in the",
        "report (`posenc report`) and in `posenc notes`; `posenc show NAME` prints the",
        "corrections about encoding NAME, and the guided tour (`python -m posenc`) the five",
        "errors a reader meets first.",
        "",
        f"**{summary_line(selected)}.**",
        "",
        "Verdicts: *holds* and *corrected* rest on a numeric demonstration (`posenc notes --demo KEY`",
        "prints one); claims about trained models are settled by the train-short / test-long",
        "benchmark (*holds*, *contradicted* or *inconclusive*: decided only where the 95% interval",
        "excludes the other side; *pending* until measured); *not checked* claims are outside what",
        "posenc models.",
        "",
        "The tutorial's code runs as `from posenc.reference.tutorial import Embedding, PositionalEncoding`",
        "(its `from src.layers import ...`); `python -m posenc.reference.tutorial` runs its usage",
        "example and its try-it-yourself block.",
    ]
    if measured_by:
        lines += [
            "",
            f"The measured verdicts come from `{measured_by}` (the copy task; `--seeds` in the",
            "command says which training seeds; what each measured row compares, and the open questions in full:",
            'docs/benchmark.md, section "The notes\' claims about trained models").',
            "`python scripts/update_notes_page.py --results DIR` rewrites this page from such a run.",
        ]
    for key, title in NOTES.items():
        rows = [c for c in selected if c.note == key]
        if not rows:
            continue
        lines += [
            "",
            f"## {title}",
            "",
            "| # | the note says | verdict | what holds | see it |",
            "|---|---|---|---|---|",
        ]
        for c in rows:
            verdict = f"**{c.verdict}**" if c.verdict in (CORRECTED, CONTRADICTED) else verdict_text(c)
            demo = f"posenc notes --demo {c.check}"
            see = f"`{c.command}`" + (f"; `{demo}`" if c.check and c.command != demo else "")
            lines.append(
                f"| {c.id} | {_md(c.says)} <br>*{_md(c.where)}* | {verdict} | {_md(render_truth(c, demos))} | {see} |"
            )
    lines += [
        "",
        "## What posenc compare measures for the pending claims",
        "",
        "| key | measured |",
        "|---|---|",
        *(f"| `{k}` | {_md(v)} |" for k, v in MEASURES.items()),
        "",
    ]
    return "\n".join(lines)


__all__ = [
    "CLAIMS",
    "CONTRADICTED",
    "CORRECTED",
    "Claim",
    "DEMONSTRATIONS",
    "HOLDS",
    "INCONCLUSIVE",
    "LABELS",
    "MEASURED_VERDICTS",
    "MEASURES",
    "NOTES",
    "NOT_CHECKED",
    "PENDING",
    "PENDING_TEXT",
    "VERDICTS",
    "checks_of",
    "claims",
    "counts",
    "markdown",
    "measured_claims",
    "shipped_measurements",
    "render_truth",
    "summary_line",
    "verdict_text",
    "with_measurements",
]
