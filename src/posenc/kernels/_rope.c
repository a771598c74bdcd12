/* Fused rotary (RoPE / xPos) application, one pass over memory.
 *
 * Axis legend: b batch, h heads, n positions, d head_dim, r rotary_dim, r/2 pairs.
 * x (b, h, n, d) with any strides for b, h, n and unit stride for d; cos/sin (b, h, n, r/2)
 * (stride 0 where broadcast, unit stride for r/2); out (b, h, n, d) likewise.
 * Per pair (x1, x2) with (c, s):  y1 = x1 c - x2 (sign s),  y2 = x1 (sign s) + x2 c.
 * sign = +1 is the forward rotation, sign = -1 its transpose (the backward pass).
 * Features r..d-1 are copied when copy_rest is set (skip it for in-place calls).
 * Built with -ffp-contract=off so every product and sum is rounded exactly as the
 * plain PyTorch path rounds it; half-precision inputs compute in float32.
 *
 * Calling convention: one pointer to int64 words, JOB_WORDS per job, and a job count (q and
 * k in one call). Passing one array instead of ~20 scalars keeps the foreign call itself
 * well under a microsecond, which is what a one-token decode step is made of.
 *
 * Order of work: rows are visited in tiles of TILE positions; within a tile, every head
 * reads the same cos/sin rows (when they are broadcast over heads), which stay in L1
 * instead of being fetched once per head from farther away.
 */
#include <stdint.h>
#include <string.h>
#include <omp.h>

typedef uint16_t bf16_t;

enum {
    A_X, A_OUT, A_COS, A_SIN, A_B, A_H, A_N, A_D, A_R, A_INTERLEAVED, A_SIGN,
    A_XSB, A_XSH, A_XSN, A_OSB, A_OSH, A_OSN, A_CSB, A_CSH, A_CSN, A_COPY_REST, A_THREADS,
    JOB_WORDS
};
#define TILE 16

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

/* One row: gather the pairs into a, z (locals), rotate into out. Separate functions so
 * that `restrict` holds in each (x and out may be the same memory for in-place calls). */
#define DEFINE_ROW(SUFFIX, T, CT, LOAD, STORE)                                                   \
    static inline __attribute__((always_inline)) void gather_##SUFFIX(                           \
        const T *restrict x, CT *restrict a, CT *restrict z, int64_t half, int interleaved) {     \
        if (interleaved) {                                                                        \
            for (int64_t p = 0; p < half; ++p) {                                                  \
                a[p] = LOAD(x[2 * p]);                                                            \
                z[p] = LOAD(x[2 * p + 1]);                                                        \
            }                                                                                     \
        } else {                                                                                  \
            for (int64_t p = 0; p < half; ++p) a[p] = LOAD(x[p]);                                 \
            for (int64_t p = 0; p < half; ++p) z[p] = LOAD(x[p + half]);                          \
        }                                                                                         \
    }                                                                                             \
    static inline __attribute__((always_inline)) void rotate_##SUFFIX(                           \
        const CT *restrict a, const CT *restrict z, const CT *restrict c, const CT *restrict s,   \
        T *restrict out, int64_t half, int interleaved, CT sg) {                                  \
        if (interleaved) {                                                                        \
            for (int64_t p = 0; p < half; ++p) {                                                  \
                const CT sp = s[p] * sg;                                                          \
                out[2 * p] = STORE(a[p] * c[p] - z[p] * sp);                                      \
                out[2 * p + 1] = STORE(a[p] * sp + z[p] * c[p]);                                  \
            }                                                                                     \
        } else {                                                                                  \
            for (int64_t p = 0; p < half; ++p) out[p] = STORE(a[p] * c[p] - z[p] * (s[p] * sg));  \
            for (int64_t p = 0; p < half; ++p)                                                    \
                out[p + half] = STORE(a[p] * (s[p] * sg) + z[p] * c[p]);                          \
        }                                                                                         \
    }

/* One row of the "half" layout read straight from x (out is other memory: no gather into
 * locals needed). Same products and sums, in the same order, as gather + rotate. (The
 * interleaved layout keeps the gather: read in place, its pattern is complex multiplication,
 * which the compiler may turn into fused multiply-adds, breaking bitwise equality.) */
#define DEFINE_DIRECT(SUFFIX, T, CT, LOAD, STORE)                                                \
    static inline __attribute__((always_inline)) void direct_##SUFFIX(                           \
        const T *restrict x, const CT *restrict c, const CT *restrict s, T *restrict out,         \
        int64_t half, CT sg) {                                                                    \
        for (int64_t p = 0; p < half; ++p) {                                                      \
            const CT x1 = LOAD(x[p]), x2 = LOAD(x[p + half]), sp = s[p] * sg;                     \
            out[p] = STORE(x1 * c[p] - x2 * sp);                                                  \
            out[p + half] = STORE(x1 * sp + x2 * c[p]);                                           \
        }                                                                                         \
    }

/* The tiles of one thread, [begin, end) in units of (b, tile, h): each unit is up to TILE
 * consecutive positions of one (b, h). always_inline so that each call below with a literal
 * `half` becomes its own copy with constant trip counts (fully vectorised). */
#define DEFINE_UNITS(SUFFIX, T, CT, ROTATE, DIRECT)                                              \
    static inline __attribute__((always_inline)) void units_##SUFFIX(                            \
        const int64_t *restrict j, int64_t begin, int64_t end, int64_t tiles, int64_t half,        \
        CT *a, CT *z) {                                                                           \
        const T *x = (const T *)(intptr_t)j[A_X];                                                 \
        T *out = (T *)(intptr_t)j[A_OUT];                                                         \
        const CT *cos = (const CT *)(intptr_t)j[A_COS], *sin = (const CT *)(intptr_t)j[A_SIN];    \
        const int64_t H = j[A_H], N = j[A_N], D = j[A_D], R = j[A_R];                             \
        const int interleaved = (int)j[A_INTERLEAVED], copy_rest = (int)j[A_COPY_REST];           \
        const CT sg = (CT)j[A_SIGN];                                                              \
        for (int64_t unit = begin; unit < end; ++unit) {                                          \
            const int64_t h = unit % H, tile = (unit / H) % tiles, b = unit / (H * tiles);        \
            const int64_t n0 = tile * TILE, n1 = n0 + TILE < N ? n0 + TILE : N;                   \
            for (int64_t n = n0; n < n1; ++n) {                                                   \
                const T *xr = x + b * j[A_XSB] + h * j[A_XSH] + n * j[A_XSN];                     \
                T *orow = out + b * j[A_OSB] + h * j[A_OSH] + n * j[A_OSN];                       \
                const int64_t co = b * j[A_CSB] + h * j[A_CSH] + n * j[A_CSN];                    \
                if (copy_rest && !interleaved) { /* out is not x: read the row where it is */    \
                    DIRECT(xr, cos + co, sin + co, orow, half, sg);                               \
                } else { /* gather the row first (in place: before overwriting it) */            \
                    gather_##SUFFIX(xr, a, z, half, interleaved);                                 \
                    ROTATE(a, z, cos + co, sin + co, orow, half, interleaved, sg);                \
                }                                                                                 \
                if (copy_rest)                                                                    \
                    for (int64_t e = R; e < D; ++e) orow[e] = xr[e];                              \
            }                                                                                     \
        }                                                                                         \
    }

#define UNITS_CALL(SUFFIX, HALF) units_##SUFFIX(job, begin, end, tiles, HALF, a, z)

#define DEFINE_ROPE(SUFFIX, T, CT, ROTATE, DIRECT)                                               \
    DEFINE_UNITS(SUFFIX, T, CT, ROTATE, DIRECT)                                                   \
    void posenc_rope_##SUFFIX(const int64_t *jobs, int count) {                                   \
        for (int i = 0; i < count; ++i) {                                                         \
            const int64_t *job = jobs + (int64_t)i * JOB_WORDS;                                   \
            const int64_t half = job[A_R] / 2, N = job[A_N];                                      \
            const int64_t tiles = (N + TILE - 1) / TILE, units = job[A_B] * job[A_H] * tiles;     \
            if (units <= 0 || half <= 0) continue; /* empty: nothing to rotate */                 \
            if (job[A_THREADS] <= 1) { /* no thread team for a small job (a decode step) */       \
                const int64_t begin = 0, end = units;                                             \
                CT a[half], z[half];                                                              \
                switch (half) {                                                                   \
                case 32: UNITS_CALL(SUFFIX, 32); break;                                           \
                case 64: UNITS_CALL(SUFFIX, 64); break;                                           \
                default: UNITS_CALL(SUFFIX, half);                                                \
                }                                                                                 \
                continue;                                                                         \
            }                                                                                     \
            _Pragma("omp parallel num_threads((int)job[A_THREADS])") {                           \
                const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();               \
                const int64_t begin = units * t / nt, end = units * (t + 1) / nt;                 \
                CT a[half], z[half];                                                              \
                switch (half) { /* head_dim 64, 128: constant loops (measured 1.8x faster) */   \
                case 32: UNITS_CALL(SUFFIX, 32); break;                                           \
                case 64: UNITS_CALL(SUFFIX, 64); break;                                           \
                default: UNITS_CALL(SUFFIX, half);                                                \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    }

DEFINE_ROW(f32, float, float, ID, ID)
DEFINE_ROW(f64, double, double, ID, ID)
DEFINE_ROW(bf16, bf16_t, float, bf16_load, bf16_store)
DEFINE_ROW(f16, _Float16, float, (float), (_Float16))
DEFINE_DIRECT(f32, float, float, ID, ID)
DEFINE_DIRECT(f64, double, double, ID, ID)
DEFINE_DIRECT(bf16, bf16_t, float, bf16_load, bf16_store)
DEFINE_DIRECT(f16, _Float16, float, (float), (_Float16))

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
/* bfloat16 output through the CPU's own float->bf16 instruction (round to nearest even, as
 * bf16_store for every non-NaN value): rotate into a float row, then convert 16 at a time. */
static inline __attribute__((always_inline)) void rotate_bf16_native(
    const float *restrict a, const float *restrict z, const float *restrict c,
    const float *restrict s, bf16_t *restrict out, int64_t half, int interleaved, float sg) {
    float y[2 * half];
    rotate_f32(a, z, c, s, y, half, interleaved, sg);
    int64_t p = 0;
    for (; p + 16 <= 2 * half; p += 16) {
        __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(y + p));
        _mm256_storeu_si256((__m256i *)(out + p), (__m256i)v);
    }
    for (; p < 2 * half; ++p) out[p] = bf16_store(y[p]);
}
#define ROTATE_BF16 rotate_bf16_native
/* The "half" layout read in place: 16 pairs per step, bfloat16 -> float32 by a shift,
 * products and sums as the plain path (no FMA), float32 -> bfloat16 by the CPU. */
static inline __attribute__((always_inline)) void direct_bf16_native(
    const bf16_t *restrict x, const float *restrict c, const float *restrict s, bf16_t *restrict out,
    int64_t half, float sg) {
    const __m512 vsg = _mm512_set1_ps(sg);
    int64_t p = 0;
    for (; p + 16 <= half; p += 16) {
        const __m512 x1 = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + p))), 16));
        const __m512 x2 = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + p + half))), 16));
        const __m512 cc = _mm512_loadu_ps(c + p), sp = _mm512_mul_ps(_mm512_loadu_ps(s + p), vsg);
        const __m512 y1 = _mm512_sub_ps(_mm512_mul_ps(x1, cc), _mm512_mul_ps(x2, sp));
        const __m512 y2 = _mm512_add_ps(_mm512_mul_ps(x1, sp), _mm512_mul_ps(x2, cc));
        _mm256_storeu_si256((__m256i *)(out + p), (__m256i)_mm512_cvtneps_pbh(y1));
        _mm256_storeu_si256((__m256i *)(out + p + half), (__m256i)_mm512_cvtneps_pbh(y2));
    }
    for (; p < half; ++p) {
        const float x1 = bf16_load(x[p]), x2 = bf16_load(x[p + half]), sp = s[p] * sg;
        out[p] = bf16_store(x1 * c[p] - x2 * sp);
        out[p + half] = bf16_store(x1 * sp + x2 * c[p]);
    }
}
#define DIRECT_BF16 direct_bf16_native
#else
#define ROTATE_BF16 rotate_bf16
#define DIRECT_BF16 direct_bf16
#endif

DEFINE_ROPE(f32, float, float, rotate_f32, direct_f32)
DEFINE_ROPE(f64, double, double, rotate_f64, direct_f64)
DEFINE_ROPE(bf16, bf16_t, float, ROTATE_BF16, DIRECT_BF16)
DEFINE_ROPE(f16, _Float16, float, rotate_f16, direct_f16)

/* Bumped whenever a signature or the job layout above changes; the loader checks it. */
int posenc_abi_version(void) { return 2; }
