/* Fused rotary (RoPE / xPos) application, one pass over memory.
 *
 * Axis legend: b batch, h heads, n positions, d head_dim, r rotary_dim, r/2 pairs.
 * x (b, h, n, d) with any strides for b, h, n and unit stride for d; cos/sin (b, h, n, r/2)
 * (stride 0 where broadcast, unit stride for r/2); out (b, h, n, d) likewise.
 * Per pair (x1, x2) with (c, s):  y1 = x1 c - x2 (sign s),  y2 = x1 (sign s) + x2 c.
 * sign = +1 is the forward rotation, sign = -1 its transpose (the backward pass).
 * Features r..d-1 are copied when copy_rest is set (skip it for in-place calls).
 *
 * Rounding: every product and sum is rounded exactly as the plain PyTorch path rounds it
 * (built with -ffp-contract=off, and the vector code below uses no fused multiply-add), so
 * float32/float64 results are bitwise equal to the plain path; half-precision inputs compute
 * in float32 and round once at the end, to nearest even (bfloat16: NaN -> 0x7fc0, as
 * c10::BFloat16).
 *
 * Vector code, chosen by the instruction set the library is compiled for (-march=native by
 * default; kernels/_build.py can force another, see POSENC_KERNEL_ISA):
 *   - AVX-512 (F, BW, DQ, VL): 16 pairs per step for half precision, 8 (AVX2 code) for float32,
 *     which is bound by memory and ran faster that way (see "The width per dtype" below);
 *   - AVX2 (+ F16C): 8 pairs per step;
 *   both widen bfloat16 to float32 with an integer shift and round float32 to bfloat16 to
 *   nearest even with integer adds and shifts, in vector registers (no BF16 instruction: the
 *   AVX-512 BF16 conversion flushes subnormal results to zero, which torch does not);
 *   - otherwise plain C loops (the compiler's own vectorisation).
 * The same scalar loops finish every row whose pair count is not a whole number of steps.
 * All variants give the same bits (tests/unit/kernels/test__build.py builds each and checks).
 *
 * Calling convention: one pointer to int64 words, JOB_WORDS per job, and a job count (q and
 * k in one call). Passing one array instead of ~20 scalars keeps the foreign call itself
 * well under a microsecond, which is what a one-token decode step is made of.
 *
 * Order of work: units of up to TILE consecutive positions of one (b, h), visited over
 * (b, group, tile, h) with h fastest, a group being a few consecutive heads: the heads of a
 * group read the same cos/sin rows (when they are broadcast over heads), which stay in L1,
 * while each head's rows are read and written in order, tile after tile. Few heads per group
 * keep the number of memory streams small (the hardware prefetchers track only so many: every
 * head at once, the order before, ran the (1, 32, 2048, 128) bfloat16 case at 2.4x a copy);
 * a call that fits in the caches takes more heads per group. With threads, the units of ALL
 * jobs are split evenly between them in one parallel region (one team start per call).
 *
 * Stores: a call larger than the caches (STREAM_BYTES) writes its outputs with non-temporal
 * stores when every vector store is aligned (streamable below), so that writing a line does not
 * first read it from memory; other calls, and the scalar tails, use plain stores.
 */
#include <stdint.h>
#include <string.h>
#include <omp.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
/* Integer vector stores, non-temporal when nt (the address is then aligned to the vector). */
static inline void STORE256(__m256i *p, __m256i v, int nt) { nt ? _mm256_stream_si256(p, v) : _mm256_storeu_si256(p, v); }
static inline void STORE128(__m128i *p, __m128i v, int nt) { nt ? _mm_stream_si128(p, v) : _mm_storeu_si128(p, v); }
#define STREAM_FENCE() _mm_sfence() /* non-temporal stores are weakly ordered: fence before returning */
#else
#define STREAM_FENCE() ((void)0)
#endif

typedef uint16_t bf16_t;

enum {
    A_X, A_OUT, A_COS, A_SIN, A_B, A_H, A_N, A_D, A_R, A_INTERLEAVED, A_SIGN,
    A_XSB, A_XSH, A_XSN, A_OSB, A_OSH, A_OSN, A_CSB, A_CSH, A_CSN, A_COPY_REST, A_THREADS,
    JOB_WORDS
};
#define TILE 16
/* Heads per group (see the header): few streams from memory for calls larger than the caches,
 * more reuse of each cos/sin tile from L1 for calls that fit. Chosen from one thread's CPU time
 * on a shared 2-core AMD EPYC (AVX2 build; hints, not an idle machine's timing): (1, 8, 1024, 64)
 * float32 q and k took about 1.17x a copy with 4 heads per group and 1.29x with 2; (1, 32, 2048,
 * 128) bfloat16 about 1.35x with 2 and 1.6x with 4 (2.4x with every head in one group, the order
 * before). Blocking the positions so a block's cos/sin stay in L2 was slower still. */
#define STREAM_BYTES (24LL << 20) /* bytes read and written by a call past which it streams */
#define STREAM_GROUP 2
#define CACHED_GROUP 4
#define MAX_JOBS 64 /* jobs per call that share one parallel region; more run region by region */

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define ISA_AVX512 1
#define ISA_NAME "avx512"
#elif defined(__AVX2__) && defined(__F16C__)
#define ISA_AVX2 1
#define ISA_NAME "avx2"
#else
#define ISA_NAME "scalar"
#endif

/* The vector ISA this library was compiled for: "avx512", "avx2" or "scalar". */
const char *posenc_isa(void) { return ISA_NAME; }

/* ------------------------------------------------------------------------------------------
 * Scalar conversions and rows (every dtype; the tails of the vector rows).
 * ---------------------------------------------------------------------------------------- */

static inline float bf16_load(bf16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline bf16_t bf16_store(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)0x7fc0; /* NaN, as c10::BFloat16 */
    u += 0x7fffu + ((u >> 16) & 1u);                               /* round to nearest even */
    return (bf16_t)(u >> 16);
}

#define ID(v) (v)

/* Pairs [from, half) of one row. Each step reads its pair before writing it, so x and out
 * may be the same memory (in-place calls). */
#define DEFINE_SCALAR(SUFFIX, T, CT, LOAD, STORE)                                                  \
    static inline void half_tail_##SUFFIX(const T *x, T *out, const CT *c, const CT *s,            \
                                          int64_t from, int64_t half, CT sg) {                     \
        for (int64_t p = from; p < half; ++p) {                                                    \
            const CT x1 = LOAD(x[p]), x2 = LOAD(x[p + half]), sp = s[p] * sg;                      \
            out[p] = STORE(x1 * c[p] - x2 * sp);                                                   \
            out[p + half] = STORE(x1 * sp + x2 * c[p]);                                            \
        }                                                                                          \
    }                                                                                              \
    static inline void inter_tail_##SUFFIX(const T *x, T *out, const CT *c, const CT *s,           \
                                           int64_t from, int64_t half, CT sg) {                    \
        for (int64_t p = from; p < half; ++p) {                                                    \
            const CT x1 = LOAD(x[2 * p]), x2 = LOAD(x[2 * p + 1]), sp = s[p] * sg;                 \
            out[2 * p] = STORE(x1 * c[p] - x2 * sp);                                               \
            out[2 * p + 1] = STORE(x1 * sp + x2 * c[p]);                                           \
        }                                                                                          \
    }

DEFINE_SCALAR(f32, float, float, ID, ID)
DEFINE_SCALAR(f64, double, double, ID, ID)
DEFINE_SCALAR(bf16, bf16_t, float, bf16_load, bf16_store)
DEFINE_SCALAR(f16, _Float16, float, (float), (_Float16))

/* ------------------------------------------------------------------------------------------
 * Vector rows, in two widths: W = 16 floats (AVX-512) and W = 8 (AVX2). VF<W> is a vector of W
 * floats; per dtype, LD<W>_<T>(p) widens W elements at p to VF<W> and ST<W>_<T>(p, v) rounds
 * VF<W> to W elements at p. An AVX-512 build has both and picks one per dtype (see below).
 * ---------------------------------------------------------------------------------------- */

#if defined(ISA_AVX512)
#define HAVE_W16 1
typedef __m512 VF16;
#define VMUL16 _mm512_mul_ps
#define VADD16 _mm512_add_ps
#define VSUB16 _mm512_sub_ps
#define VLOADF16 _mm512_loadu_ps
#define VNEG16(v) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)))
static inline VF16 LD16_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline void ST16_f32(float *p, VF16 v, int nt) { nt ? _mm512_stream_ps(p, v) : _mm512_storeu_ps(p, v); }
static inline VF16 LD16_bf16(const bf16_t *p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
static inline void ST16_bf16(bf16_t *p, VF16 v, int nt) {
    /* (u + 0x7fff + ((u >> 16) & 1)) >> 16: round to nearest even; NaN -> 0x7fc0. Not the
     * AVX-512 BF16 conversion: it flushes subnormal results to zero, which torch does not. */
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    r = _mm512_mask_blend_epi32(nan, r, _mm512_set1_epi32(0x7fc0));
    STORE256((__m256i *)p, _mm512_cvtepi32_epi16(r), nt);
}
static inline VF16 LD16_f16(const _Float16 *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline void ST16_f16(_Float16 *p, VF16 v, int nt) {
    STORE256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), nt);
}
/* Interleaved pairs: (a, z) of 2*W consecutive elements, de-interleaved per 128-bit lane;
 * the cos/sin rows are permuted the same way and the results re-interleaved lane by lane. */
#define SHUF_A16(v0, v1) _mm512_shuffle_ps(v0, v1, 0x88)
#define SHUF_Z16(v0, v1) _mm512_shuffle_ps(v0, v1, 0xDD)
static inline VF16 PERM_CS16(const float *p) {
    /* lane l of the de-interleaved vectors holds pairs 2l, 2l+1, 8+2l, 8+2l+1 */
    const __m512i idx = _mm512_setr_epi32(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
    return _mm512_permutexvar_ps(idx, _mm512_loadu_ps(p));
}
#define UNPACK_LO16 _mm512_unpacklo_ps
#define UNPACK_HI16 _mm512_unpackhi_ps
#endif

#if defined(__AVX2__) && defined(__F16C__) /* AVX-512 builds too: those CPUs have both */
#define HAVE_W8 1
typedef __m256 VF8;
#define VMUL8 _mm256_mul_ps
#define VADD8 _mm256_add_ps
#define VSUB8 _mm256_sub_ps
#define VLOADF8 _mm256_loadu_ps
#define VNEG8(v) _mm256_xor_ps(v, _mm256_set1_ps(-0.0f))
static inline VF8 LD8_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline void ST8_f32(float *p, VF8 v, int nt) { nt ? _mm256_stream_ps(p, v) : _mm256_storeu_ps(p, v); }
static inline VF8 LD8_bf16(const bf16_t *p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
static inline void ST8_bf16(bf16_t *p, VF8 v, int nt) {
    /* (u + 0x7fff + ((u >> 16) & 1)) >> 16: round to nearest even; NaN -> 0x7fc0 */
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc00000), nan);
    /* the high halves (the >> 16): bytes 2, 3 of each word to the low 8 bytes of each 128-bit
     * lane, then the two lanes' low 8 bytes together */
    const __m256i hi = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1,
                                        2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
    r = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(r, hi), 0x08);
    STORE128((__m128i *)p, _mm256_castsi256_si128(r), nt);
}
static inline VF8 LD8_f16(const _Float16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline void ST8_f16(_Float16 *p, VF8 v, int nt) {
    STORE128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), nt);
}
#define SHUF_A8(v0, v1) _mm256_shuffle_ps(v0, v1, 0x88)
#define SHUF_Z8(v0, v1) _mm256_shuffle_ps(v0, v1, 0xDD)
static inline VF8 PERM_CS8(const float *p) {
    /* lane l of the de-interleaved vectors holds pairs 2l, 2l+1, 4+2l, 4+2l+1 */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_loadu_ps(p)), 0xD8));
}
#define UNPACK_LO8 _mm256_unpacklo_ps
#define UNPACK_HI8 _mm256_unpackhi_ps
#endif

/* One row, "half" layout: pairs (p, p + half), W of them per step. NEG: the transpose
 * (sign -1), whose products use -s (negation is exact: the same bits as s * -1). */
#define DEFINE_VECTOR(SUFFIX, T, W)                                                                \
    /* non-temporal stores of 16 bytes (AVX2 half precision) filled lines too slowly: measured */  \
    enum { STREAMS_##SUFFIX = W * sizeof(T) >= 32 };                                               \
    static inline __attribute__((always_inline)) void half_row_##SUFFIX(                           \
        const T *x, T *out, const float *c, const float *s, int64_t half, int neg, int nt) {       \
        int64_t p = 0;                                                                             \
        for (; p + W <= half; p += W) {                                                            \
            const VF##W x1 = LD##W##_##SUFFIX(x + p), x2 = LD##W##_##SUFFIX(x + p + half);         \
            const VF##W cc = VLOADF##W(c + p);                                                     \
            const VF##W ss = neg ? VNEG##W(VLOADF##W(s + p)) : VLOADF##W(s + p);                   \
            ST##W##_##SUFFIX(out + p, VSUB##W(VMUL##W(x1, cc), VMUL##W(x2, ss)), nt);              \
            ST##W##_##SUFFIX(out + p + half, VADD##W(VMUL##W(x1, ss), VMUL##W(x2, cc)), nt);       \
        }                                                                                          \
        if (p < half) half_tail_##SUFFIX(x, out, c, s, p, half, neg ? -1.0f : 1.0f);               \
    }                                                                                              \
    /* One row, "interleaved" layout: pairs (2p, 2p + 1), W of them (2 W elements) per step. */    \
    static inline __attribute__((always_inline)) void inter_row_##SUFFIX(                          \
        const T *x, T *out, const float *c, const float *s, int64_t half, int neg, int nt) {       \
        int64_t p = 0;                                                                             \
        for (; p + W <= half; p += W) {                                                            \
            const VF##W v0 = LD##W##_##SUFFIX(x + 2 * p), v1 = LD##W##_##SUFFIX(x + 2 * p + W);    \
            const VF##W a = SHUF_A##W(v0, v1), z = SHUF_Z##W(v0, v1);                              \
            const VF##W cc = PERM_CS##W(c + p);                                                    \
            const VF##W ss = neg ? VNEG##W(PERM_CS##W(s + p)) : PERM_CS##W(s + p);                 \
            const VF##W y1 = VSUB##W(VMUL##W(a, cc), VMUL##W(z, ss));                              \
            const VF##W y2 = VADD##W(VMUL##W(a, ss), VMUL##W(z, cc));                              \
            ST##W##_##SUFFIX(out + 2 * p, UNPACK_LO##W(y1, y2), nt);                               \
            ST##W##_##SUFFIX(out + 2 * p + W, UNPACK_HI##W(y1, y2), nt);                           \
        }                                                                                          \
        if (p < half) inter_tail_##SUFFIX(x, out, c, s, p, half, neg ? -1.0f : 1.0f);              \
    }
/* no vector ISA: the scalar loops do every pair */
#define DEFINE_SCALAR_ROWS(SUFFIX, T)                                                              \
    enum { STREAMS_##SUFFIX = 0 };                                                                 \
    static inline void half_row_##SUFFIX(const T *x, T *out, const float *c, const float *s,       \
                                         int64_t half, int neg, int nt) {                          \
        (void)nt;                                                                                  \
        half_tail_##SUFFIX(x, out, c, s, 0, half, neg ? -1.0f : 1.0f);                             \
    }                                                                                              \
    static inline void inter_row_##SUFFIX(const T *x, T *out, const float *c, const float *s,      \
                                          int64_t half, int neg, int nt) {                         \
        (void)nt;                                                                                  \
        inter_tail_##SUFFIX(x, out, c, s, 0, half, neg ? -1.0f : 1.0f);                            \
    }

/* The width per dtype. An AVX-512 build rotates float32 with AVX2 vectors: float32 is bound by
 * memory, and on a 2-core AMD EPYC (Zen 4) the 256-bit code ran the race's float32 shapes at
 * 1.01-1.05x a copy against 1.12-1.14x for the 512-bit code (the builds in one process,
 * interleaved, kernel calls only: benchmarks/kernel_isa.py). Half precision keeps 512 bits: its
 * conversions are the work, and the 512-bit bfloat16 code ran at 1.05x a copy against 1.17x for
 * the AVX2 build. Measured on that CPU only. */
#if defined(HAVE_W16) && defined(HAVE_W8)
DEFINE_VECTOR(f32, float, 8)
DEFINE_VECTOR(bf16, bf16_t, 16)
DEFINE_VECTOR(f16, _Float16, 16)
#elif defined(HAVE_W16)
DEFINE_VECTOR(f32, float, 16)
DEFINE_VECTOR(bf16, bf16_t, 16)
DEFINE_VECTOR(f16, _Float16, 16)
#elif defined(HAVE_W8)
DEFINE_VECTOR(f32, float, 8)
DEFINE_VECTOR(bf16, bf16_t, 8)
DEFINE_VECTOR(f16, _Float16, 8)
#else
DEFINE_SCALAR_ROWS(f32, float)
DEFINE_SCALAR_ROWS(bf16, bf16_t)
DEFINE_SCALAR_ROWS(f16, _Float16)
#endif

/* float64: plain loops (not a speed goal; the compiler may vectorise them). */
enum { STREAMS_f64 = 0 };
static inline void half_row_f64(const double *x, double *out, const double *c, const double *s,
                                int64_t half, int neg, int nt) {
    (void)nt;
    half_tail_f64(x, out, c, s, 0, half, neg ? -1.0 : 1.0);
}
static inline void inter_row_f64(const double *x, double *out, const double *c, const double *s,
                                 int64_t half, int neg, int nt) {
    (void)nt;
    inter_tail_f64(x, out, c, s, 0, half, neg ? -1.0 : 1.0);
}

/* ------------------------------------------------------------------------------------------
 * Jobs, tiles and threads.
 * ---------------------------------------------------------------------------------------- */

/* One copy of the units loop per (layout, sign), with HALF pairs per row; whether the stores are
 * non-temporal is a loop-invariant flag (a copy per flag doubled the build time for no speed). */
#define SPECIALISE(SUFFIX, HALF)                                                                   \
    switch (key) {                                                                                 \
    case 0: units_##SUFFIX(j, begin, end, G, HALF, 0, 0, nt); break;                               \
    case 1: units_##SUFFIX(j, begin, end, G, HALF, 0, 1, nt); break;                               \
    case 2: units_##SUFFIX(j, begin, end, G, HALF, 1, 0, nt); break;                               \
    default: units_##SUFFIX(j, begin, end, G, HALF, 1, 1, nt);                                     \
    }

/* Where unit u of a job lies: units run over (b, group, tile, h), h fastest, where a group is
 * G consecutive heads (the last one may be smaller) and a tile TILE consecutive positions. */
typedef struct {
    int64_t b, g, tile, h, h0, h1; /* h0 .. h1 - 1: the heads of group g */
} Pos;

static inline Pos unit_pos(int64_t u, int64_t H, int64_t tiles, int64_t G) {
    Pos q;
    const int64_t per_b = H * tiles;
    q.b = u / per_b;
    u -= q.b * per_b;
    q.g = u / (G * tiles); /* every group before the last is full */
    u -= q.g * G * tiles;
    q.h0 = q.g * G;
    q.h1 = q.h0 + G < H ? q.h0 + G : H;
    q.tile = u / (q.h1 - q.h0);
    q.h = q.h0 + u % (q.h1 - q.h0);
    return q;
}

static inline void next_unit(Pos *q, int64_t H, int64_t tiles, int64_t G) {
    if (++q->h < q->h1) return;
    q->h = q->h0;
    if (++q->tile < tiles) return;
    q->tile = 0;
    q->h0 = q->h1;
    if (q->h0 >= H) q->h0 = 0, ++q->b;
    q->h = q->h0;
    q->h1 = q->h0 + G < H ? q->h0 + G : H;
}

/* Units [begin, end) of one job; each unit is up to TILE consecutive positions of one (b, h).
 * always_inline with literal HALF / INTER / NEG below, so that the common head sizes get their
 * own copy with constant trip counts and no branch per row. */
#define DEFINE_UNITS(SUFFIX, T, CT)                                                                \
    static inline __attribute__((always_inline)) void units_##SUFFIX(                              \
        const int64_t *restrict j, int64_t begin, int64_t end, int64_t G, int64_t half,            \
        int inter, int neg, int nt) {                                                              \
        const T *x = (const T *)(intptr_t)j[A_X];                                                  \
        T *out = (T *)(intptr_t)j[A_OUT];                                                          \
        const CT *cos = (const CT *)(intptr_t)j[A_COS], *sin = (const CT *)(intptr_t)j[A_SIN];     \
        const int64_t H = j[A_H], N = j[A_N], D = j[A_D], R = j[A_R];                              \
        const int64_t tiles = (N + TILE - 1) / TILE;                                               \
        const int64_t xsb = j[A_XSB], xsh = j[A_XSH], xsn = j[A_XSN];                              \
        const int64_t osb = j[A_OSB], osh = j[A_OSH], osn = j[A_OSN];                              \
        const int64_t csb = j[A_CSB], csh = j[A_CSH], csn = j[A_CSN];                              \
        const int64_t rest = j[A_COPY_REST] ? D - R : 0;                                           \
        Pos q = unit_pos(begin, H, tiles, G);                                                      \
        for (int64_t unit = begin; unit < end; ++unit, next_unit(&q, H, tiles, G)) {               \
            const int64_t n0 = q.tile * TILE, n1 = n0 + TILE < N ? n0 + TILE : N;                  \
            const T *xr = x + q.b * xsb + q.h * xsh + n0 * xsn;                                    \
            T *orow = out + q.b * osb + q.h * osh + n0 * osn;                                      \
            const CT *cr = cos + q.b * csb + q.h * csh + n0 * csn;                                 \
            const CT *sr = sin + q.b * csb + q.h * csh + n0 * csn;                                 \
            for (int64_t n = n0; n < n1; ++n) {                                                    \
                if (inter)                                                                         \
                    inter_row_##SUFFIX(xr, orow, cr, sr, half, neg, nt);                           \
                else                                                                               \
                    half_row_##SUFFIX(xr, orow, cr, sr, half, neg, nt);                            \
                if (rest) memcpy(orow + R, xr + R, (size_t)rest * sizeof(T));                      \
                xr += xsn, orow += osn, cr += csn, sr += csn;                                      \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void range_##SUFFIX(const int64_t *j, int64_t begin, int64_t end, int64_t G, int nt) {  \
        const int64_t half = j[A_R] / 2;                                                           \
        const int inter = (int)j[A_INTERLEAVED], neg = j[A_SIGN] < 0;                              \
        const int key = (inter << 1) | neg;                                                        \
        /* head_dim 64 and 128: constant loops (measured 1.8x faster); anything else: a loop */    \
        if (half == 32) {                                                                          \
            SPECIALISE(SUFFIX, 32);                                                                \
        } else if (half == 64) {                                                                   \
            SPECIALISE(SUFFIX, 64);                                                                \
        } else {                                                                                   \
            SPECIALISE(SUFFIX, half);                                                              \
        }                                                                                          \
    }

/* Whether every vector store of a job is aligned to its width, so that it may be non-temporal:
 * the output and each of its rows start on a 64-byte boundary, and (half layout) so does the
 * second half of a row. (Interleaved rows store 2 W consecutive elements per step.) */
static inline int streamable(const int64_t *j, int64_t size) {
    const int64_t half_row = j[A_INTERLEAVED] ? 0 : j[A_R] / 2 * size;
    return ((j[A_OUT] | j[A_OSB] * size | j[A_OSH] * size | j[A_OSN] * size | half_row) & 63) == 0;
}

static inline int64_t job_units(const int64_t *j) {
    if (j[A_R] < 2) return 0; /* nothing to rotate */
    return j[A_B] * j[A_H] * ((j[A_N] + TILE - 1) / TILE);
}

/* Units [lo, hi) of the concatenation of jobs[0 .. count), each job's part by RANGE. */
#define DEFINE_SPAN(SUFFIX)                                                                        \
    static void span_##SUFFIX(const int64_t *jobs, int count, const int64_t *first, int64_t lo,    \
                              int64_t hi, int64_t G, int nt) {                                     \
        for (int i = 0; i < count; ++i) {                                                          \
            const int64_t *j = jobs + (int64_t)i * JOB_WORDS;                                      \
            const int64_t a = lo > first[i] ? lo : first[i];                                       \
            const int64_t e = hi < first[i + 1] ? hi : first[i + 1];                               \
            if (a < e) range_##SUFFIX(j, a - first[i], e - first[i], G, nt);                       \
        }                                                                                          \
        if (nt) STREAM_FENCE();                                                                    \
    }

/* Calls that wrote with non-temporal stores (what the tests read to know the path ran). */
static int64_t streamed_calls = 0;
int64_t posenc_rope_streamed_calls(void) { return __atomic_load_n(&streamed_calls, __ATOMIC_RELAXED); }

/* Run `count` jobs: one parallel region for all of them when any asks for threads, none otherwise.
 * Calls that read and write more than STREAM_BYTES write with non-temporal stores when every
 * store is aligned (see streamable): their outputs would not stay in the caches anyway, and a
 * plain store first reads its line from memory (on a 2-core AMD EPYC, Zen 4, the float32 race
 * shapes went from 1.03-1.07x a copy to 0.73-0.79x, kernel calls only, benchmarks/kernel_isa.py). */
#define DEFINE_ROPE(SUFFIX, T, CT)                                                                 \
    DEFINE_UNITS(SUFFIX, T, CT)                                                                    \
    DEFINE_SPAN(SUFFIX)                                                                            \
    static void batch_##SUFFIX(const int64_t *jobs, int count) {                                   \
        int64_t first[MAX_JOBS + 1];                                                               \
        int threads = 1;                                                                           \
        int64_t bytes = 0;                                                                         \
        int aligned = 1;                                                                           \
        first[0] = 0;                                                                              \
        for (int i = 0; i < count; ++i) {                                                          \
            const int64_t *j = jobs + (int64_t)i * JOB_WORDS;                                      \
            first[i + 1] = first[i] + job_units(j);                                                \
            bytes += 2 * j[A_B] * j[A_H] * j[A_N] * j[A_D] * (int64_t)sizeof(T);                   \
            if (j[A_THREADS] > threads) threads = (int)j[A_THREADS];                               \
            if (!streamable(j, sizeof(T))) aligned = 0;                                            \
        }                                                                                          \
        const int big = bytes > STREAM_BYTES; /* larger than the caches */                        \
        const int64_t G = big ? STREAM_GROUP : CACHED_GROUP;                                       \
        const int nt = STREAMS_##SUFFIX && aligned && big;                                         \
        const int64_t total = first[count];                                                        \
        if (total <= 0) return;                                                                    \
        if (nt) __atomic_fetch_add(&streamed_calls, 1, __ATOMIC_RELAXED);                          \
        if (threads <= 1 || total < 2) { /* no thread team for a small call (a decode step) */     \
            span_##SUFFIX(jobs, count, first, 0, total, G, nt);                                    \
            return;                                                                                \
        }                                                                                          \
        _Pragma("omp parallel num_threads(threads)") {                                             \
            const int64_t n = omp_get_num_threads(), t = omp_get_thread_num();                     \
            span_##SUFFIX(jobs, count, first, total * t / n, total * (t + 1) / n, G, nt);          \
        }                                                                                          \
    }                                                                                              \
    void posenc_rope_##SUFFIX(const int64_t *jobs, int count) {                                    \
        for (int i = 0; i < count; i += MAX_JOBS)                                                  \
            batch_##SUFFIX(jobs + (int64_t)i * JOB_WORDS, count - i < MAX_JOBS ? count - i : MAX_JOBS); \
    }

DEFINE_ROPE(f32, float, float)
DEFINE_ROPE(f64, double, double)
DEFINE_ROPE(bf16, bf16_t, float)
DEFINE_ROPE(f16, _Float16, float)

/* Bumped whenever a signature or the job layout above changes; the loader checks it. */
int posenc_abi_version(void) { return 2; }
