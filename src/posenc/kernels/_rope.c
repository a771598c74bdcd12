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
 */
#include <stdint.h>
#include <string.h>
#include <omp.h>

typedef uint16_t bf16_t;

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
    static inline __attribute__((always_inline)) void gather_##SUFFIX(const T *restrict x, CT *restrict a, CT *restrict z,       \
                                       int64_t half, int interleaved) {                           \
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
    static inline __attribute__((always_inline)) void rotate_##SUFFIX(const CT *restrict a, const CT *restrict z,                \
                                       const CT *restrict c, const CT *restrict s,                \
                                       T *restrict out, int64_t half, int interleaved, CT sg) {   \
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

/* The row loop of one thread, [begin, end). always_inline so that each call below with a
 * literal `half` becomes its own copy with constant trip counts (fully vectorised, no
 * prologue/epilogue per row: rows are short, 16-64 pairs). */
#define DEFINE_ROWS(SUFFIX, T, CT, ROTATE)                                                       \
    static inline __attribute__((always_inline)) void rows_##SUFFIX(                             \
        const T *x, T *out, const CT *cos, const CT *sin, int64_t begin, int64_t end, int64_t H,  \
        int64_t N, int64_t D, int64_t R, int64_t half, int interleaved, CT sg, int64_t xsb,       \
        int64_t xsh, int64_t xsn, int64_t osb, int64_t osh, int64_t osn, int64_t csb,             \
        int64_t csh, int64_t csn, int copy_rest, CT *a, CT *z) {                                  \
        int64_t b = begin / (H * N), h = (begin / N) % H, n = begin % N;                          \
        for (int64_t row = begin; row < end; ++row) {                                             \
            const T *xr = x + b * xsb + h * xsh + n * xsn;                                        \
            T *orow = out + b * osb + h * osh + n * osn;                                          \
            const int64_t co = b * csb + h * csh + n * csn;                                       \
            gather_##SUFFIX(xr, a, z, half, interleaved);                                         \
            ROTATE(a, z, cos + co, sin + co, orow, half, interleaved, sg);                        \
            if (copy_rest)                                                                        \
                for (int64_t e = R; e < D; ++e) orow[e] = xr[e];                                  \
            if (++n == N) { /* next row without a division */                                     \
                n = 0;                                                                            \
                if (++h == H) h = 0, ++b;                                                         \
            }                                                                                     \
        }                                                                                         \
    }

#define ROWS_CALL(SUFFIX, HALF)                                                                  \
    rows_##SUFFIX(x, out, cos, sin, begin, end, H, N, D, R, HALF, interleaved, sg, xsb, xsh, xsn, \
                  osb, osh, osn, csb, csh, csn, copy_rest, a, z)

#define DEFINE_ROPE(SUFFIX, T, CT, ROTATE)                                                       \
    DEFINE_ROWS(SUFFIX, T, CT, ROTATE)                                                            \
    void posenc_rope_##SUFFIX(const T *x, T *out, const CT *cos, const CT *sin, int64_t B,        \
                              int64_t H, int64_t N, int64_t D, int64_t R, int interleaved,        \
                              int sign, int64_t xsb, int64_t xsh, int64_t xsn, int64_t osb,       \
                              int64_t osh, int64_t osn, int64_t csb, int64_t csh, int64_t csn,    \
                              int copy_rest, int nthreads) {                                      \
        const int64_t half = R / 2, rows = B * H * N;                                             \
        const CT sg = (CT)sign;                                                                   \
        if (rows <= 0 || half <= 0) return; /* empty: no row index to divide by */                \
        _Pragma("omp parallel num_threads(nthreads)") {                                          \
            const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();                   \
            const int64_t begin = rows * t / nt, end = rows * (t + 1) / nt;                       \
            CT a[half], z[half];                                                                  \
            switch (half) { /* head_dim 64, 128: constant loops (measured 1.8x faster) */       \
            case 32: ROWS_CALL(SUFFIX, 32); break;                                                \
            case 64: ROWS_CALL(SUFFIX, 64); break;                                                \
            default: ROWS_CALL(SUFFIX, half);                                                     \
            }                                                                                     \
        }                                                                                         \
    }

DEFINE_ROW(f32, float, float, ID, ID)
DEFINE_ROW(f64, double, double, ID, ID)
DEFINE_ROW(bf16, bf16_t, float, bf16_load, bf16_store)
DEFINE_ROW(f16, _Float16, float, (float), (_Float16))

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
/* bfloat16 output through the CPU's own float->bf16 instruction (round to nearest even, as
 * bf16_store for every non-NaN value): rotate into a float row, then convert 16 at a time. */
static inline __attribute__((always_inline)) void rotate_bf16_native(const float *restrict a, const float *restrict z,
                                      const float *restrict c, const float *restrict s,
                                      bf16_t *restrict out, int64_t half, int interleaved, float sg) {
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
#else
#define ROTATE_BF16 rotate_bf16
#endif

DEFINE_ROPE(f32, float, float, rotate_f32)
DEFINE_ROPE(f64, double, double, rotate_f64)
DEFINE_ROPE(bf16, bf16_t, float, ROTATE_BF16)
DEFINE_ROPE(f16, _Float16, float, rotate_f16)

/* Bumped whenever a signature above changes; the loader checks it. */
int posenc_abi_version(void) { return 1; }
