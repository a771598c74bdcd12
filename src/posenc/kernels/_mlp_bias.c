/* A bias given by a small MLP of one scalar per score, x = a[t] * s[r] (FIRE: a distance term
 * times a per-query normaliser), for one row block of attention with the keys reversed.
 *
 * Axis legend: h heads (MLP outputs), u hidden units, r rows (queries) of the block,
 * c columns (keys, reversed: column c is key keys-1-c), t index into the per-distance table.
 *
 * Row r, column c reads a[t0 + r + c] (a Hankel pattern: the distance i - j grows with r and
 * with c); a negative entry marks a masked distance (keys after the query), whose bias is -inf.
 *
 *   forward:  bias[h, r, c] = b2[h] + sum_u w2[h, u] relu(w1[u] x + b1[u])
 *   backward: from the score gradient g[h, r, c] (zero where masked):
 *             d b2[h]    += g
 *             d w2[h, u] += g relu(w1[u] x + b1[u])
 *             e_u         = sum_h g w2[h, u]  (where w1[u] x + b1[u] > 0)
 *             d w1[u]    += e_u x,   d b1[u] += e_u
 *             d x         = sum_u e_u w1[u]
 *             d a[t]     += d x s[r],   d s[r] += d x a[t]
 * Float32 arithmetic per score; the gradient sums over scores accumulate in float64 (the
 * d-outputs are float64 arrays the caller zeroes once and passes for every block). Threads
 * split the rows; each keeps its own accumulators, summed at the end (deterministic for a
 * given thread count).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#define CHUNK 64 /* columns per inner tile: the hidden activations of a tile stay in L1 */

enum {
    M_OUT, M_A, M_S, M_W1, M_B1, M_W2, M_B2, M_H, M_U, M_ROWS, M_COLS, M_T0,
    M_OSH, M_OSR, M_THREADS, M_GRAD, M_GSH, M_GSR, M_DA, M_DS, M_DW1, M_DB1, M_DW2, M_DB2,
    M_WORDS
};

#define PTR(T, i) ((T)(intptr_t)args[i])

static inline void hidden_tile(const float *x, int64_t n, const float *w1, const float *b1, int64_t U,
                               float *hid) {
    for (int64_t u = 0; u < U; ++u) {
        const float w = w1[u], b = b1[u];
        float *hu = hid + u * CHUNK;
        for (int64_t c = 0; c < n; ++c) {
            const float pre = w * x[c] + b;
            hu[c] = pre > 0.0f ? pre : 0.0f;
        }
    }
}

void posenc_mlp_bias_forward(const int64_t *args) {
    float *out = PTR(float *, M_OUT);
    const float *a = PTR(const float *, M_A), *s = PTR(const float *, M_S);
    const float *w1 = PTR(const float *, M_W1), *b1 = PTR(const float *, M_B1);
    const float *w2 = PTR(const float *, M_W2), *b2 = PTR(const float *, M_B2);
    const int64_t H = args[M_H], U = args[M_U], R = args[M_ROWS], C = args[M_COLS], t0 = args[M_T0];
    const int64_t osh = args[M_OSH], osr = args[M_OSR];
    _Pragma("omp parallel num_threads((int)args[M_THREADS])") {
        float x[CHUNK], acc[CHUNK];
        float *hid = malloc(sizeof(float) * U * CHUNK);
        _Pragma("omp for schedule(static)")
        for (int64_t r = 0; r < R; ++r) {
            const float sr = s[r];
            for (int64_t c0 = 0; c0 < C; c0 += CHUNK) {
                const int64_t n = C - c0 < CHUNK ? C - c0 : CHUNK;
                const float *ar = a + t0 + r + c0;
                for (int64_t c = 0; c < n; ++c) x[c] = ar[c] * sr;
                hidden_tile(x, n, w1, b1, U, hid);
                for (int64_t h = 0; h < H; ++h) {
                    for (int64_t c = 0; c < n; ++c) acc[c] = b2[h];
                    for (int64_t u = 0; u < U; ++u) {
                        const float w = w2[h * U + u];
                        const float *hu = hid + u * CHUNK;
                        for (int64_t c = 0; c < n; ++c) acc[c] += w * hu[c];
                    }
                    float *o = out + h * osh + r * osr + c0;
                    for (int64_t c = 0; c < n; ++c) o[c] = ar[c] < 0.0f ? -INFINITY : acc[c];
                }
            }
        }
        free(hid);
    }
}

void posenc_mlp_bias_backward(const int64_t *args) {
    const float *a = PTR(const float *, M_A), *s = PTR(const float *, M_S);
    const float *w1 = PTR(const float *, M_W1), *b1 = PTR(const float *, M_B1);
    const float *w2 = PTR(const float *, M_W2), *g = PTR(const float *, M_GRAD);
    double *da = PTR(double *, M_DA), *ds = PTR(double *, M_DS);
    double *dw1 = PTR(double *, M_DW1), *db1 = PTR(double *, M_DB1);
    double *dw2 = PTR(double *, M_DW2), *db2 = PTR(double *, M_DB2);
    const int64_t H = args[M_H], U = args[M_U], R = args[M_ROWS], C = args[M_COLS], t0 = args[M_T0];
    const int64_t gsh = args[M_GSH], gsr = args[M_GSR];
    const int64_t span = R + C - 1; /* the entries of a this block reads: t0 .. t0 + span - 1 */
    const int threads = (int)args[M_THREADS];
    /* per-thread accumulators: [dw2 (H*U) | db2 (H) | dw1 (U) | db1 (U) | da (span)] */
    const int64_t words = H * U + H + 2 * U + span;
    double *partial = calloc((size_t)threads * (size_t)words, sizeof(double));
    _Pragma("omp parallel num_threads(threads)") {
        double *mine = partial + (int64_t)omp_get_thread_num() * words;
        double *pw2 = mine, *pb2 = mine + H * U, *pw1 = pb2 + H, *pb1 = pw1 + U, *pa = pb1 + U;
        float x[CHUNK], dx[CHUNK], e[CHUNK];
        float *hid = malloc(sizeof(float) * U * CHUNK);
        _Pragma("omp for schedule(static)")
        for (int64_t r = 0; r < R; ++r) {
            const float sr = s[r];
            double dsr = 0.0;
            for (int64_t c0 = 0; c0 < C; c0 += CHUNK) {
                const int64_t n = C - c0 < CHUNK ? C - c0 : CHUNK;
                const float *ar = a + t0 + r + c0;
                float dsc = 0.0f;
                for (int64_t c = 0; c < n; ++c) x[c] = ar[c] < 0.0f ? 0.0f : ar[c] * sr;
                hidden_tile(x, n, w1, b1, U, hid);
                for (int64_t h = 0; h < H; ++h) {
                    const float *gr = g + h * gsh + r * gsr + c0;
                    float sum = 0.0f;
                    for (int64_t c = 0; c < n; ++c) sum += gr[c];
                    pb2[h] += sum;
                    for (int64_t u = 0; u < U; ++u) {
                        const float *hu = hid + u * CHUNK;
                        float dot = 0.0f;
                        for (int64_t c = 0; c < n; ++c) dot += gr[c] * hu[c];
                        pw2[h * U + u] += dot;
                    }
                }
                for (int64_t c = 0; c < n; ++c) dx[c] = 0.0f;
                for (int64_t u = 0; u < U; ++u) {
                    const float *hu = hid + u * CHUNK;
                    for (int64_t c = 0; c < n; ++c) e[c] = 0.0f;
                    for (int64_t h = 0; h < H; ++h) {
                        const float w = w2[h * U + u];
                        const float *gr = g + h * gsh + r * gsr + c0;
                        for (int64_t c = 0; c < n; ++c) e[c] += w * gr[c];
                    }
                    float sw = 0.0f, sb = 0.0f;
                    for (int64_t c = 0; c < n; ++c) {
                        const float eu = hu[c] > 0.0f ? e[c] : 0.0f;
                        sw += eu * x[c];
                        sb += eu;
                        dx[c] += eu * w1[u];
                    }
                    pw1[u] += sw;
                    pb1[u] += sb;
                }
                for (int64_t c = 0; c < n; ++c) {
                    if (ar[c] < 0.0f) continue; /* masked: no gradient */
                    pa[r + c0 + c] += dx[c] * sr;
                    dsc += dx[c] * ar[c];
                }
                dsr += dsc;
            }
            ds[r] += dsr;
        }
        free(hid);
    }
    for (int t = 0; t < threads; ++t) {
        const double *p = partial + (int64_t)t * words;
        for (int64_t i = 0; i < H * U; ++i) dw2[i] += p[i];
        for (int64_t i = 0; i < H; ++i) db2[i] += p[H * U + i];
        for (int64_t i = 0; i < U; ++i) dw1[i] += p[H * U + H + i];
        for (int64_t i = 0; i < U; ++i) db1[i] += p[H * U + H + U + i];
        for (int64_t i = 0; i < span; ++i) da[t0 + i] += p[H * U + H + 2 * U + i];
    }
    free(partial);
}

int posenc_abi_version(void) { return 2; }
