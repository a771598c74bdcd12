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

#define DEFINE_ROPE(NAME, T, CT, LOAD, STORE)                                                   \
    void NAME(const T *x, T *out, const CT *cos, const CT *sin, int64_t B, int64_t H, int64_t N,  \
              int64_t D, int64_t R, int interleaved, int sign, int64_t xsb, int64_t xsh,          \
              int64_t xsn, int64_t osb, int64_t osh, int64_t osn, int64_t csb, int64_t csh,       \
              int64_t csn, int copy_rest, int nthreads) {                                         \
        const int64_t half = R / 2, rows = B * H * N;                                             \
        const CT sg = (CT)sign;                                                                   \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static)")                       \
        for (int64_t row = 0; row < rows; ++row) {                                                \
            const int64_t b = row / (H * N), h = (row / N) % H, n = row % N;                      \
            const T *xr = x + b * xsb + h * xsh + n * xsn;                                        \
            T *orow = out + b * osb + h * osh + n * osn;                                          \
            const CT *c = cos + b * csb + h * csh + n * csn;                                      \
            const CT *s = sin + b * csb + h * csh + n * csn;                                      \
            CT a[half], z[half]; /* the row's pairs, read before anything is written */           \
            if (interleaved) {                                                                    \
                for (int64_t p = 0; p < half; ++p) {                                              \
                    a[p] = LOAD(xr[2 * p]);                                                       \
                    z[p] = LOAD(xr[2 * p + 1]);                                                   \
                }                                                                                 \
                for (int64_t p = 0; p < half; ++p) {                                              \
                    const CT sp = s[p] * sg;                                                      \
                    orow[2 * p] = STORE(a[p] * c[p] - z[p] * sp);                                 \
                    orow[2 * p + 1] = STORE(a[p] * sp + z[p] * c[p]);                             \
                }                                                                                 \
            } else {                                                                              \
                for (int64_t p = 0; p < half; ++p) {                                              \
                    a[p] = LOAD(xr[p]);                                                           \
                    z[p] = LOAD(xr[p + half]);                                                    \
                }                                                                                 \
                for (int64_t p = 0; p < half; ++p) {                                              \
                    const CT sp = s[p] * sg;                                                      \
                    orow[p] = STORE(a[p] * c[p] - z[p] * sp);                                     \
                    orow[p + half] = STORE(a[p] * sp + z[p] * c[p]);                              \
                }                                                                                 \
            }                                                                                     \
            if (copy_rest)                                                                        \
                for (int64_t e = R; e < D; ++e) orow[e] = xr[e];                                  \
        }                                                                                         \
    }

DEFINE_ROPE(posenc_rope_f32, float, float, ID, ID)
DEFINE_ROPE(posenc_rope_f64, double, double, ID, ID)
DEFINE_ROPE(posenc_rope_bf16, bf16_t, float, bf16_load, bf16_store)
DEFINE_ROPE(posenc_rope_f16, _Float16, float, (float), (_Float16))

/* Bumped whenever a signature above changes; the loader checks it. */
int posenc_abi_version(void) { return 1; }
