/* Attention of query tokens over lists of cache slots, each key scored by a query of its own choosing.
 *
 * Built by paragen/engine/fused.py (gcc -O3 -march=native -ffast-math -fopenmp, on the machine that
 * runs it) and called through ctypes with the raw pointers of contiguous CPU tensors; one call is one
 * layer of a forward.
 *
 * A layer's cache is [2 * num_kv_heads, num_slots, head_dim] (K heads, then V heads). Token t has
 * query_count[t] rotations of its raw query (row t of qkv: its heads first), rotation r turning it by
 * the cos/sin row query_base[t] + r (or none: rot_cos NULL, the queries come rotated). Token t reads
 * the keys at key_slots[key_start[t] .. key_start[t] + key_count[t]), key i scored by the token's
 * rotation key_query[i]: a Hogwild! view's segments are read at shifts of their own, one rotation
 * per shift; a plain decode has one. Scores, softmax and the value sum are fp32 whatever the dtypes.
 * The (token, kv head) pairs are shared out over OpenMP threads (torch's own runtime: both load
 * libgomp.so.1).
 *
 * With AVX-512 and a bf16 cache whose head_dim is a multiple of 32, keys and values are widened to
 * fp32 in a permuted order (a 64-byte load holds 32 bf16: its even elements are the low halves of
 * 16 32-bit lanes, the odd ones the high halves, two instructions to widen both); the token's
 * queries are stored permuted the same way, so the dot products need no shuffles, and the value sum
 * is put back in order once at the end.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

typedef struct {
    const void *kv;
    long num_slots;
    int num_kv_heads, group, head_dim, kv_bf16;
    float scale;
    const void *qkv;
    long qkv_row;
    int qkv_bf16;
    const float *rot_cos, *rot_sin;
    const int32_t *key_slots, *key_query;
    void *out;
    int out_bf16;
} Layer;

typedef struct {
    int32_t start, count, query_base, query_count;
    int token, head;
} Unit;

static inline float bf16_to_float(uint16_t x) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)x << 16;
    return v.f;
}

static inline uint16_t float_to_bf16(float x) {
    union { float f; uint32_t u; } v;
    v.f = x;
    return (uint16_t)((v.u + 0x7FFF + ((v.u >> 16) & 1)) >> 16);  /* round to nearest even */
}

static inline float element(const void *base, size_t at, int is_bf16) {
    return is_bf16 ? bf16_to_float(((const uint16_t *)base)[at]) : ((const float *)base)[at];
}

/* The unit's queries ([query_count][group][D], fp32, times the scale), rotated; ``permuted``: each
 * 32-element chunk stored as its even elements, then its odd ones (the AVX-512 bf16 order). */
static void rotate_queries(const Layer *L, const Unit *u, float *queries, int permuted) {
    const int d = L->head_dim, half = d / 2;
    float raw[d], turned[d];
    for (int g = 0; g < L->group; g++) {
        const size_t at = (size_t)u->token * L->qkv_row + (size_t)(u->head * L->group + g) * d;
        for (int j = 0; j < d; j++) raw[j] = element(L->qkv, at + j, L->qkv_bf16);
        for (int r = 0; r < u->query_count; r++) {
            if (L->rot_cos != NULL) {
                const float *c = L->rot_cos + (size_t)(u->query_base + r) * d;
                const float *s = L->rot_sin + (size_t)(u->query_base + r) * d;
                for (int j = 0; j < d; j++) turned[j] = raw[j] * c[j] + raw[j < half ? j + half : j - half] * s[j];
            } else {
                memcpy(turned, raw, sizeof(float) * d);
            }
            float *q = queries + ((size_t)r * L->group + g) * d;
            for (int j = 0; j < d; j++) {
                const int to = permuted ? (j & ~31) + ((j & 1) ? 16 : 0) + ((j & 31) >> 1) : j;
                q[to] = turned[j] * L->scale;
            }
        }
    }
}

/* Softmax of each query's ``count`` (>= 1) scores, in place. The running maximum starts at the first
 * score, not at -INFINITY: -ffast-math lets the compiler assume no infinities. */
static void softmax_rows(float *scores, int group, int32_t count) {
    for (int g = 0; g < group; g++) {
        float *s = scores + (size_t)g * count, top = s[0], total = 0.0f;
        for (int32_t i = 0; i < count; i++) top = s[i] > top ? s[i] : top;
        for (int32_t i = 0; i < count; i++) {
            s[i] = expf(s[i] - top);
            total += s[i];
        }
        const float inv = 1.0f / total;
        for (int32_t i = 0; i < count; i++) s[i] *= inv;
    }
}

static void store_out(const Layer *L, const Unit *u, const float *acc) {
    const int width = L->group * L->head_dim;
    const size_t at = ((size_t)u->token * L->num_kv_heads + u->head) * width;
    if (L->out_bf16)
        for (int j = 0; j < width; j++) ((uint16_t *)L->out)[at + j] = float_to_bf16(acc[j]);
    else
        memcpy((float *)L->out + at, acc, sizeof(float) * width);
}

static inline void load_row(const void *base, size_t at, int is_bf16, float *row, int d) {
    if (is_bf16)
        for (int j = 0; j < d; j++) row[j] = bf16_to_float(((const uint16_t *)base)[at + j]);
    else
        memcpy(row, (const float *)base + at, sizeof(float) * d);
}

/* Any dtype and head size, element by element (the compiler vectorises the inner loops; inlined with
 * a constant head size where it is a common one). */
static inline __attribute__((always_inline)) void attend_plain_d(const Layer *L, const Unit *u, float *scratch,
                                                                 const int d) {
    const int group = L->group;
    const int32_t count = u->count, *slots = L->key_slots + u->start, *which = L->key_query + u->start;
    float *queries = scratch, *scores = queries + (size_t)u->query_count * group * d;
    float *row = scores + (size_t)group * count, *acc = row + d;
    const size_t key_row = (size_t)u->head * L->num_slots, value_row = key_row + (size_t)L->num_kv_heads * L->num_slots;
    rotate_queries(L, u, queries, 0);
    for (int32_t i = 0; i < count; i++) {
        load_row(L->kv, (key_row + slots[i]) * d, L->kv_bf16, row, d);
        const float *q = queries + (size_t)which[i] * group * d;
        for (int g = 0; g < group; g++) {
            float dot = 0.0f;
            for (int j = 0; j < d; j++) dot += q[g * d + j] * row[j];
            scores[(size_t)g * count + i] = dot;
        }
    }
    softmax_rows(scores, group, count);
    for (int j = 0; j < group * d; j++) acc[j] = 0.0f;
    for (int32_t i = 0; i < count; i++) {
        load_row(L->kv, (value_row + slots[i]) * d, L->kv_bf16, row, d);
        for (int g = 0; g < group; g++) {
            const float p = scores[(size_t)g * count + i];
            for (int j = 0; j < d; j++) acc[g * d + j] += p * row[j];
        }
    }
    store_out(L, u, acc);
}

static void attend_plain(const Layer *L, const Unit *u, float *scratch) { attend_plain_d(L, u, scratch, L->head_dim); }
static void attend_plain_64(const Layer *L, const Unit *u, float *scratch) { attend_plain_d(L, u, scratch, 64); }
static void attend_plain_128(const Layer *L, const Unit *u, float *scratch) { attend_plain_d(L, u, scratch, 128); }

#if defined(__AVX512F__)
#define MAX_GROUP 8
#define KEYS 8
#define HIGH_HALVES 0xFFFF0000u

/* The sums of 8 vectors' lanes, in order, to out[0..7]. */
static inline void sum8(const __m512 v[KEYS], float *out) {
    __m512 pairs[4], quads[2];
    for (int k = 0; k < 4; k++)
        pairs[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 2; k++) {
        __m512d a = _mm512_castps_pd(pairs[2 * k]), b = _mm512_castps_pd(pairs[2 * k + 1]);
        quads[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    /* quads[k]: per 128-bit lane, the partial sums of keys 4k..4k+3 */
    __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], 0x88), _mm512_shuffle_f32x4(quads[0], quads[1], 0xDD));
    t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0xB1));
    _mm_storeu_ps(out, _mm512_extractf32x4_ps(t, 0));
    _mm_storeu_ps(out + 4, _mm512_extractf32x4_ps(t, 2));
}

static inline void widen(const uint16_t *p, __m512 *even, __m512 *odd) {
    const __m512i both = _mm512_loadu_si512((const void *)p);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(both, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(both, _mm512_set1_epi32((int)HIGH_HALVES)));
}

/* bf16 cache, head_dim a multiple of 32, group <= MAX_GROUP: see the file's comment. Inlined with
 * constant sizes (group, 32-element chunks per head) so the accumulators stay in registers: a block
 * of KEYS keys is widened once for all the group's queries, KEYS x group sums at once. */
static inline __attribute__((always_inline)) void attend_avx512_g(const Layer *L, const Unit *u, float *scratch,
                                                                  const int group, const int chunks) {
    const int d = 32 * chunks;
    const int32_t count = u->count, *slots = L->key_slots + u->start, *which = L->key_query + u->start;
    float *queries = scratch, *scores = queries + (size_t)u->query_count * group * d;
    float *acc = scores + (size_t)group * (count + KEYS);
    const uint16_t *keys = (const uint16_t *)L->kv + (size_t)u->head * L->num_slots * d;
    const uint16_t *values = keys + (size_t)L->num_kv_heads * L->num_slots * d;
    rotate_queries(L, u, queries, 1);
    for (int32_t first = 0; first < count; first += KEYS) {
        const int n = count - first < KEYS ? count - first : KEYS;
        __m512 sums[MAX_GROUP][KEYS];
        for (int g = 0; g < group; g++)
            for (int k = 0; k < KEYS; k++) sums[g][k] = _mm512_setzero_ps();
        for (int k = 0; k < KEYS; k++) {  /* past n: the block's first key again, its sums unused */
            const int32_t i = first + (k < n ? k : 0);
            const uint16_t *key = keys + (size_t)slots[i] * d;
            const float *q = queries + (size_t)which[i] * group * d;
            for (int c = 0; c < chunks; c++) {
                __m512 even, odd;
                widen(key + 32 * c, &even, &odd);
                for (int g = 0; g < group; g++) {
                    sums[g][k] = _mm512_fmadd_ps(_mm512_loadu_ps(q + g * d + 32 * c), even, sums[g][k]);
                    sums[g][k] = _mm512_fmadd_ps(_mm512_loadu_ps(q + g * d + 32 * c + 16), odd, sums[g][k]);
                }
            }
        }
        for (int g = 0; g < group; g++) {
            float eight[KEYS];
            sum8(sums[g], eight);
            memcpy(scores + (size_t)g * count + first, eight, sizeof(float) * n);
        }
    }
    softmax_rows(scores, group, count);
    __m512 totals[MAX_GROUP][2 * 8];  /* per query, per chunk: even and odd lanes (head_dim <= 256) */
    for (int g = 0; g < group; g++)
        for (int c = 0; c < 2 * chunks; c++) totals[g][c] = _mm512_setzero_ps();
    for (int32_t i = 0; i < count; i++) {
        const uint16_t *value = values + (size_t)slots[i] * d;
        for (int c = 0; c < chunks; c++) {
            __m512 even, odd;
            widen(value + 32 * c, &even, &odd);
            for (int g = 0; g < group; g++) {
                const __m512 p = _mm512_set1_ps(scores[(size_t)g * count + i]);
                totals[g][2 * c] = _mm512_fmadd_ps(p, even, totals[g][2 * c]);
                totals[g][2 * c + 1] = _mm512_fmadd_ps(p, odd, totals[g][2 * c + 1]);
            }
        }
    }
    for (int g = 0; g < group; g++)
        for (int c = 0; c < chunks; c++) {
            float even[16], odd[16];
            _mm512_storeu_ps(even, totals[g][2 * c]);
            _mm512_storeu_ps(odd, totals[g][2 * c + 1]);
            for (int i = 0; i < 16; i++) {
                acc[g * d + 32 * c + 2 * i] = even[i];
                acc[g * d + 32 * c + 2 * i + 1] = odd[i];
            }
        }
    store_out(L, u, acc);
}

static void attend_avx512(const Layer *L, const Unit *u, float *scratch) {
    attend_avx512_g(L, u, scratch, L->group, L->head_dim / 32);
}
static void attend_avx512_g3_d64(const Layer *L, const Unit *u, float *scratch) { attend_avx512_g(L, u, scratch, 3, 2); }
#endif

typedef void (*Attend)(const Layer *, const Unit *, float *);

static Attend pick(const Layer *L) {
#if defined(__AVX512F__)
    if (L->kv_bf16 && L->head_dim % 32 == 0 && L->head_dim <= 256 && L->group <= MAX_GROUP)
        return L->group == 3 && L->head_dim == 64 ? attend_avx512_g3_d64 : attend_avx512;
#endif
    return L->head_dim == 64 ? attend_plain_64 : L->head_dim == 128 ? attend_plain_128 : attend_plain;
}

/* Returns 0, or -1 when a thread's scratch could not be allocated (then ``out`` is not to be used). */
int paged_attention(const void *kv, int kv_bf16, long num_slots, int num_kv_heads, int group, int head_dim,
                    float scale, const void *qkv, int qkv_bf16, long qkv_row, const float *rot_cos,
                    const float *rot_sin, const int32_t *key_slots, const int32_t *key_query,
                    const int32_t *key_start, const int32_t *key_count, const int32_t *query_base,
                    const int32_t *query_count, int num_tokens, int max_count, int max_queries,
                    int num_threads, void *out, int out_bf16) {
    const Layer layer = {kv,       num_slots, num_kv_heads, group,     head_dim,  kv_bf16, scale,
                         qkv,      qkv_row,   qkv_bf16,     rot_cos,   rot_sin,   key_slots, key_query,
                         out,      out_bf16};
    const Attend attend = pick(&layer);
    const size_t scratch = (size_t)max_queries * group * head_dim + (size_t)group * (max_count + 8)
                           + (size_t)(group + 1) * head_dim;
    const long num_units = (long)num_tokens * num_kv_heads;
    int failed = 0;
#pragma omp parallel num_threads(num_threads > 0 ? num_threads : 1)
    {
        float *buffer = malloc(sizeof(float) * scratch);
        if (buffer == NULL) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (long i = 0; i < num_units; i++) {
            const int t = (int)(i / num_kv_heads);
            const Unit unit = {key_start[t], key_count[t], query_base[t], query_count[t], t, (int)(i % num_kv_heads)};
            if (buffer != NULL) attend(&layer, &unit, buffer);
        }
        free(buffer);
    }
    return failed ? -1 : 0;
}
