/* Attention of query tokens over lists of cache slots, each key scored by a query of its own choosing.
 *
 * Built by paragen/engine/kernels/fused_library.py (gcc -O3 -march=native -ffast-math -fopenmp, on the
 * machine that runs it) and called through ctypes with one argument, a Layer (below) holding the raw
 * pointers of contiguous CPU tensors; one call is one layer of a forward.
 *
 * A layer's cache is [2 * num_kv_heads, num_slots, head_dim] (K heads, then V heads). Token t has
 * query_count[t] rotations of its raw query (row t of qkv: its heads first), rotation r turning it by
 * the cos/sin row query_base[t] + r (or none: rot_cos NULL, the queries come rotated). Token t reads
 * the keys at key_slots[key_start[t] .. key_start[t] + key_count[t]), its i-th key scored by the
 * token's rotation key_query[choice_start[t] + i] (key_query NULL: rotation 0 for every key): a
 * Hogwild! view's segments are read at shifts of their own, one rotation per shift; a plain decode
 * has one. Scores, softmax and the value sum accumulate in fp32.
 *
 * Tokens come in classes (class_tokens[class_start[c] .. class_start[c + 1])): the tokens of a class
 * read one list of keys (the same key_start; each the first key_count[t] of them, with choices of
 * its own). A Hogwild! session's workers read the same slots in different orders at different
 * shifts, so one list in one order serves them all, and where the CPU has AVX512-BF16 each key is
 * loaded from memory once for the whole class, not once per worker (a view is ~1,000 slots of which a
 * worker's own are a few dozen). The (class, KV head) pairs are shared out over OpenMP threads (torch's own runtime: both load libgomp.so.1),
 * classes cut into parts when there are too few pairs to keep every thread busy.
 *
 * Paths, by what the CPU and the cache are:
 * - AVX512-BF16 and a bf16 cache, head_dim a multiple of 32: the scores as products of bf16 pairs
 *   (vdpbf16ps, fp32 sums), as FlashAttention computes them: keys as stored, each 16 transposed so
 *   a lane holds a key, the rotated queries rounded to bf16. A class of several tokens: up to 4
 *   tokens' queries scored together per block, probabilities rounded to bf16 and summed with the
 *   values by vdpbf16ps too; a class of one (a plain decode row) widens the values to fp32 and sums
 *   them with fp32 probabilities.
 * - AVX-512 without BF16, bf16 cache: keys and values widened to fp32 in a permuted order (a 64-byte
 *   load holds 32 bf16: its even elements are the low halves of 16 32-bit lanes, the odd ones the
 *   high halves, two instructions to widen both), queries stored permuted the same way so the dot
 *   products need no shuffles; the value sum is put back in order once at the end.
 * - Otherwise (fp32 caches, AVX2-only CPUs): plain C loops the compiler vectorises, in fp32.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define VALUE_BLOCK 32 /* keys whose values the bf16 path widens once for a one-token class */
#define PAIR_BLOCK 16  /* pairs of keys whose values it interleaves once for a class of several */

/* The one argument of paged_attention: mirrored field for field by fused_library.Layer (a ctypes
 * Structure), which checks the offsets against paged_attention_layout before any call. */
typedef struct {
    /* this layer's cache [2 * num_kv_heads, num_slots, head_dim], queries and output */
    const void *kv;
    long num_slots;
    int kv_bf16;
    const void *qkv;
    long qkv_row;
    int qkv_bf16;
    void *out;
    int out_bf16;
    /* the model's attention */
    int num_kv_heads, group, head_dim;
    float scale;
    /* what each token reads, the same for every layer of a forward */
    const float *rot_cos, *rot_sin;
    const int32_t *key_slots, *key_query, *key_start, *key_count, *choice_start, *query_base, *query_count;
    const int32_t *class_tokens, *class_start;
    int num_classes, max_count, max_queries, max_class;
    int num_threads;
} Layer;

/* sizeof(Layer), then each field's offset in declaration order, into out[0 .. capacity); returns how
 * many there are. */
int paged_attention_layout(long *out, int capacity) {
    const long layout[] = {
        sizeof(Layer),
        offsetof(Layer, kv), offsetof(Layer, num_slots), offsetof(Layer, kv_bf16), offsetof(Layer, qkv),
        offsetof(Layer, qkv_row), offsetof(Layer, qkv_bf16), offsetof(Layer, out), offsetof(Layer, out_bf16),
        offsetof(Layer, num_kv_heads), offsetof(Layer, group), offsetof(Layer, head_dim), offsetof(Layer, scale),
        offsetof(Layer, rot_cos), offsetof(Layer, rot_sin), offsetof(Layer, key_slots), offsetof(Layer, key_query),
        offsetof(Layer, key_start), offsetof(Layer, key_count), offsetof(Layer, choice_start),
        offsetof(Layer, query_base), offsetof(Layer, query_count), offsetof(Layer, class_tokens),
        offsetof(Layer, class_start), offsetof(Layer, num_classes), offsetof(Layer, max_count),
        offsetof(Layer, max_queries), offsetof(Layer, max_class), offsetof(Layer, num_threads),
    };
    const int count = (int)(sizeof(layout) / sizeof(layout[0]));
    for (int i = 0; i < count && i < capacity; i++) out[i] = layout[i];
    return count;
}

/* One token's work at one KV head: its keys, the rotation scoring each (NULL: rotation 0), its queries. */
typedef struct {
    const int32_t *slots, *which;
    int32_t count, query_base, query_count;
    int token, head;
} Unit;

static inline Unit unit_of(const Layer *L, int token, int head) {
    const Unit u = {L->key_slots + L->key_start[token],
                    L->key_query == NULL ? NULL : L->key_query + L->choice_start[token],
                    L->key_count[token], L->query_base[token], L->query_count[token], token, head};
    return u;
}

static inline int32_t choice(const int32_t *which, int32_t i) { return which == NULL ? 0 : which[i]; }

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

/* The largest of ``count`` (>= 1) scores. It starts at the first, not at -INFINITY: -ffast-math lets
 * the compiler assume no infinities. */
static inline float max_of(const float *s, int32_t count) {
    float top = s[0];
    for (int32_t i = 0; i < count; i++) top = s[i] > top ? s[i] : top;
    return top;
}

/* exp(score - max) of ``count`` (>= 1) scores, in place; returns their sum. */
static float exp_less_max(float *s, int32_t count) {
    const float top = max_of(s, count);
    float total = 0.0f;
    for (int32_t i = 0; i < count; i++) {
        s[i] = expf(s[i] - top);
        total += s[i];
    }
    return total;
}

/* Softmax of each query's ``count`` scores (rows ``stride`` apart), in place. */
static void softmax_rows(float *scores, int group, int32_t count, size_t stride) {
    for (int g = 0; g < group; g++) {
        float *s = scores + (size_t)g * stride;
        const float inv = 1.0f / exp_less_max(s, count);
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
    const int32_t count = u->count, *slots = u->slots, *which = u->which;
    float *queries = scratch, *scores = queries + (size_t)u->query_count * group * d;
    float *row = scores + (size_t)group * count, *acc = row + d;
    const size_t key_row = (size_t)u->head * L->num_slots, value_row = key_row + (size_t)L->num_kv_heads * L->num_slots;
    rotate_queries(L, u, queries, 0);
    for (int32_t i = 0; i < count; i++) {
        load_row(L->kv, (key_row + slots[i]) * d, L->kv_bf16, row, d);
        const float *q = queries + (size_t)choice(which, i) * group * d;
        for (int g = 0; g < group; g++) {
            float dot = 0.0f;
            for (int j = 0; j < d; j++) dot += q[g * d + j] * row[j];
            scores[(size_t)g * count + i] = dot;
        }
    }
    softmax_rows(scores, group, count, count);
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

/* The sums of 8 vectors' lanes, in order, stored to out[0..7]. */
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
    _mm256_storeu_ps(out, _mm512_castps512_ps256(_mm512_shuffle_f32x4(t, t, 0x08)));
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
    const int32_t count = u->count, *slots = u->slots, *which = u->which;
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
            const float *q = queries + (size_t)choice(which, i) * group * d;
            for (int c = 0; c < chunks; c++) {
                __m512 even, odd;
                widen(key + 32 * c, &even, &odd);
                for (int g = 0; g < group; g++) {
                    sums[g][k] = _mm512_fmadd_ps(_mm512_loadu_ps(q + g * d + 32 * c), even, sums[g][k]);
                    sums[g][k] = _mm512_fmadd_ps(_mm512_loadu_ps(q + g * d + 32 * c + 16), odd, sums[g][k]);
                }
            }
        }
        for (int g = 0; g < group; g++) sum8(sums[g], scores + (size_t)g * (count + KEYS) + first);  /* 8 slack */
    }
    softmax_rows(scores, group, count, count + KEYS);
    __m512 totals[MAX_GROUP][2 * 8];  /* per query, per chunk: even and odd lanes (head_dim <= 256) */
    for (int g = 0; g < group; g++)
        for (int c = 0; c < 2 * chunks; c++) totals[g][c] = _mm512_setzero_ps();
    for (int32_t i = 0; i < count; i++) {
        const uint16_t *value = values + (size_t)slots[i] * d;
        for (int c = 0; c < chunks; c++) {
            __m512 even, odd;
            widen(value + 32 * c, &even, &odd);
            for (int g = 0; g < group; g++) {
                const __m512 p = _mm512_set1_ps(scores[(size_t)g * (count + KEYS) + i]);
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

#if defined(__AVX512BF16__)
#define LANES 16 /* keys scored at once by the bf16 path: one per 32-bit lane */

/* 16 keys' rows (bf16, 32 * chunks of them) turned into dimension-pair-major vectors: kt[16 * c + j]
 * holds in lane i key i's dimensions 32c + 2j and 32c + 2j + 1, what vdpbf16ps multiplies by the
 * same two dimensions of a query broadcast to every lane. A 16 x 16 transpose of 32-bit elements
 * per chunk (within 128-bit lanes by unpacking, then across them), for the whole class at once. */
static inline __attribute__((always_inline)) void transpose_keys(const uint16_t *const key[LANES], const int chunks,
                                                                 __m512i *kt) {
    for (int c = 0; c < chunks; c++) {
        __m512i r[LANES], t[LANES], u[LANES];
        for (int i = 0; i < LANES; i++) r[i] = _mm512_loadu_si512((const void *)(key[i] + 32 * c));
        for (int i = 0; i < LANES / 2; i++) {
            t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
        }
        for (int i = 0; i < LANES / 4; i++) {  /* u[4i + e], 128-bit lane l: keys 4i..4i+3 at pair 4l + e */
            u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
            u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
            u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
            u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
        }
        for (int e = 0; e < 4; e++) {  /* pair 4l + e: lane l of u[e], u[4 + e], u[8 + e], u[12 + e] */
            const __m512i v0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x44), v1 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xEE);
            const __m512i v2 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x44), v3 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xEE);
            kt[16 * c + e] = _mm512_shuffle_i32x4(v0, v2, 0x88);
            kt[16 * c + 4 + e] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
            kt[16 * c + 8 + e] = _mm512_shuffle_i32x4(v1, v3, 0x88);
            kt[16 * c + 12 + e] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
        }
    }
}

/* The scores of 16 transposed keys by one rotation of a token's group of queries (``q``: [group][16 *
 * chunks] pairs of bf16), stored to scores[g * stride + lane] for the lanes in ``lanes``. Four sums
 * per query, so the multiply-adds are not one chain. */
static inline __attribute__((always_inline)) void score_keys(const __m512i *kt, const uint32_t *q, __mmask16 lanes,
                                                             float *scores, size_t stride, const int group,
                                                             const int chunks) {
    __m512 sums[MAX_GROUP][4];
    for (int g = 0; g < group; g++)
        for (int a = 0; a < 4; a++) sums[g][a] = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int j = 0; j < 16 * chunks; j += 4)
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            const __m512bh k = (__m512bh)kt[j + a];
#pragma GCC unroll 8
            for (int g = 0; g < group; g++)
                sums[g][a] = _mm512_dpbf16_ps(sums[g][a], k, (__m512bh)_mm512_set1_epi32((int)q[g * 16 * chunks + j + a]));
        }
    for (int g = 0; g < group; g++) {
        const __m512 total = _mm512_add_ps(_mm512_add_ps(sums[g][0], sums[g][1]), _mm512_add_ps(sums[g][2], sums[g][3]));
        _mm512_mask_storeu_ps(scores + (size_t)g * stride, lanes, total);
    }
}

/* The scores of 16 transposed keys by ``n`` (<= 4) tokens' queries at once, each token one rotation
 * for the whole block (``q[t]``: its group of queries, as in score_keys), all 16 lanes stored to
 * scores[t] + g * stride: each key pair loaded once for n * group queries, one sum per query. */
static inline __attribute__((always_inline)) void score_keys_n(const __m512i *kt, const uint32_t *const *q,
                                                               float *const *scores, size_t stride, const int n,
                                                               const int group, const int chunks) {
    __m512 sums[4 * MAX_GROUP];
    for (int i = 0; i < n * group; i++) sums[i] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int j = 0; j < 16 * chunks; j++) {
        const __m512bh k = (__m512bh)kt[j];
#pragma GCC unroll 12
        for (int i = 0; i < n * group; i++)
            sums[i] = _mm512_dpbf16_ps(sums[i], k, (__m512bh)_mm512_set1_epi32((int)q[i / group][(i % group) * 16 * chunks + j]));
    }
    for (int i = 0; i < n * group; i++) _mm512_storeu_ps(scores[i / group] + (size_t)(i % group) * stride, sums[i]);
}

/* exp(x) of 16 lanes, x <= 0 (scores less their maximum): 2^n times a polynomial of the rest, a
 * tenth of a 4-worker pass's attention cheaper than libm's. Relative error 2e-7 near 0, growing to
 * ~5e-6 at -87 (x log2 e rounded); x below -87 counts as -87 (e^-87 ~ 1.6e-38, nothing beside the
 * maximum's 1). */
static inline __m512 exp_nonpositive(__m512 x) {
    const __m512 t = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(1.44269504f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);  /* 2^f, f in [-0.5, 0.5]: its Taylor series in f ln 2 */
    __m512 p = _mm512_set1_ps(1.5403530e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* exp(score - max) of ``count`` (>= 1) scores, written as bf16 pairs (p_2m, p_2m+1), the last
 * pair's second 0 when ``count`` is odd (its key is read but weighs nothing); returns their sum in
 * fp32. The probabilities go to bf16 next, so a polynomial exp does (see exp_nonpositive). */
static inline float exp_pairs(const float *s, int32_t count, uint16_t *half) {
    const float top = max_of(s, count);
    __m512 total = _mm512_setzero_ps();
    for (int32_t i = 0; i < count; i += 16) {
        const __mmask16 live = count - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (count - i)) - 1);
        const __m512 p = _mm512_maskz_mov_ps(live, exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, s + i), _mm512_set1_ps(top))));
        total = _mm512_add_ps(total, p);
        _mm256_mask_storeu_epi16(half + i, live, (__m256i)_mm512_cvtneps_pbh(p));
    }
    if (count % 2) half[count] = 0;
    return _mm512_reduce_add_ps(total);
}

/* Adds ``num_pairs`` interleaved key pairs of ``block`` to the value sums of ``n`` (1 or 2) tokens,
 * token t's data at ``data + t * per_token`` (scores, probability pairs from ``first_pair``, sums):
 * each block vector loaded once for n * group queries. */
static inline __attribute__((always_inline)) void add_pairs(const __m512i *block, int num_pairs, float *data,
                                                            size_t per_token, const int n, size_t score_len,
                                                            size_t pair_len, int32_t first_pair, const int group,
                                                            const int chunks) {
    const int d = 32 * chunks;
    const uint32_t *pairs[2];
    float *sums[2];
    __m512 totals[2][MAX_GROUP][2 * 8];  /* per token, query, chunk: its low and high words' dimensions */
    for (int t = 0; t < n; t++) {
        pairs[t] = (const uint32_t *)(data + per_token * t + (size_t)group * score_len) + first_pair;
        sums[t] = (float *)(pairs[t] - first_pair + (size_t)group * pair_len);
        for (int g = 0; g < group; g++)
            for (int c = 0; c < 2 * chunks; c++) totals[t][g][c] = _mm512_loadu_ps(sums[t] + g * d + 16 * c);
    }
    for (int m = 0; m < num_pairs; m++)
        for (int t = 0; t < n; t++)
            for (int g = 0; g < group; g++) {
                const __m512bh p = (__m512bh)_mm512_set1_epi32((int)pairs[t][(size_t)g * pair_len + m]);
                for (int c = 0; c < 2 * chunks; c++)
                    totals[t][g][c] = _mm512_dpbf16_ps(totals[t][g][c], (__m512bh)block[m * 2 * chunks + c], p);
            }
    for (int t = 0; t < n; t++)
        for (int g = 0; g < group; g++)
            for (int c = 0; c < 2 * chunks; c++) _mm512_storeu_ps(sums[t] + g * d + 16 * c, totals[t][g][c]);
}

/* The value sums of a class of several tokens, as FlashAttention forms them: probabilities rounded
 * to bf16, two keys' values per pair of bf16 lanes (interleaved once per block for the class), one
 * vdpbf16ps per two keys and 16 dimensions, fp32 sums. unpacklo/hi work per 128-bit lane: lane l of
 * a chunk's low words holds its dimensions 8l..8l+3, of its high words 8l+4..8l+7. Token j's data
 * are ``per_token`` floats after ``data``: scores, pairs, sums. */
static inline __attribute__((always_inline)) void sum_paired(const Unit *units, int num_tokens, const int32_t *slots,
                                                             const uint16_t *values, int32_t most, __m512i *block,
                                                             float *data, size_t per_token, size_t score_len,
                                                             size_t pair_len, const int group, const int chunks) {
    const int d = 32 * chunks;
    for (int32_t first = 0; first < most; first += 2 * PAIR_BLOCK) {
        const int32_t size = most - first < 2 * PAIR_BLOCK ? most - first : 2 * PAIR_BLOCK;
        for (int m = 0; 2 * m < size; m++) {
            const int32_t i = first + 2 * m;
            const uint16_t *v0 = values + (size_t)slots[i] * d;
            const uint16_t *v1 = i + 1 < most ? values + (size_t)slots[i + 1] * d : v0;  /* its p is 0 */
            for (int32_t ahead = i + 2 * PAIR_BLOCK; ahead < i + 2 * PAIR_BLOCK + 2 && ahead < most; ahead++)
                for (int line = 0; line < chunks; line++)  /* the next block's values on their way */
                    _mm_prefetch((const char *)(values + (size_t)slots[ahead] * d + 32 * line), _MM_HINT_T0);
            for (int c = 0; c < chunks; c++) {
                const __m512i a = _mm512_loadu_si512((const void *)(v0 + 32 * c));
                const __m512i b = _mm512_loadu_si512((const void *)(v1 + 32 * c));
                block[(m * chunks + c) * 2] = _mm512_unpacklo_epi16(a, b);
                block[(m * chunks + c) * 2 + 1] = _mm512_unpackhi_epi16(a, b);
            }
        }
        int j = 0;
        for (; j + 1 < num_tokens; j += 2) {  /* two tokens that read the whole block, together */
            if (units[j].count - first < size || units[j + 1].count - first < size) break;
            add_pairs(block, (size + 1) / 2, data + per_token * j, per_token, 2, score_len, pair_len, first / 2, group, chunks);
        }
        for (; j < num_tokens; j++) {
            const int32_t left = units[j].count - first < size ? units[j].count - first : size;
            if (left > 0) add_pairs(block, (left + 1) / 2, data + per_token * j, per_token, 1, score_len, pair_len, first / 2, group, chunks);
        }
    }
}

/* The value sums of a class of one token (every plain decode row, and so ``workers=1``): values
 * widened to fp32 (the permuted order of ``widen``: even dimensions, then odd) and summed with fp32
 * probabilities. Kept apart from sum_paired so that one worker decodes exactly as the plain decode
 * (with bf16 probabilities its greedy text drifts from the plain decode's: tests/strategies/test_hogwild_engine.py). */
static inline __attribute__((always_inline)) void sum_widened(const Unit *units, const int32_t *slots,
                                                              const uint16_t *values, int32_t most, __m512 *widened,
                                                              const float *scores, float *sums, size_t score_len,
                                                              const int group, const int chunks) {
    const int d = 32 * chunks;
    for (int32_t first = 0; first < most; first += VALUE_BLOCK) {
        const int32_t size = most - first < VALUE_BLOCK ? most - first : VALUE_BLOCK;
        for (int m = 0; m < size; m++) {
            const uint16_t *value = values + (size_t)slots[first + m] * d;
            if (first + VALUE_BLOCK + m < most)  /* the next block's values on their way from memory */
                for (int line = 0; line < chunks; line++)
                    _mm_prefetch((const char *)(values + (size_t)slots[first + VALUE_BLOCK + m] * d + 32 * line), _MM_HINT_T0);
            for (int c = 0; c < chunks; c++) widen(value + 32 * c, &widened[(m * chunks + c) * 2], &widened[(m * chunks + c) * 2 + 1]);
        }
        const int32_t left = units[0].count - first < size ? units[0].count - first : size;
        const float *p = scores + first;
        __m512 totals[MAX_GROUP][2 * 8];  /* per query, per chunk: its even and odd dimensions */
        for (int g = 0; g < group; g++)
            for (int c = 0; c < 2 * chunks; c++) totals[g][c] = _mm512_loadu_ps(sums + g * d + 16 * c);
        for (int m = 0; m < left; m++)
            for (int g = 0; g < group; g++) {
                const __m512 weight = _mm512_set1_ps(p[(size_t)g * score_len + m]);
                for (int c = 0; c < 2 * chunks; c++)
                    totals[g][c] = _mm512_fmadd_ps(weight, widened[m * 2 * chunks + c], totals[g][c]);
            }
        for (int g = 0; g < group; g++)
            for (int c = 0; c < 2 * chunks; c++) _mm512_storeu_ps(sums + g * d + 16 * c, totals[g][c]);
    }
}

/* A class's tokens at one KV head (see the file's comment), bf16 cache, head_dim a multiple of 32,
 * group <= MAX_GROUP; inlined with constant sizes so the sums stay in registers. Each block of 16
 * keys is transposed once and scored by every token of the class (each lane by that token's
 * rotation for it: a block where the choice changes is scored once per choice in it), so a key is
 * loaded from memory once and its scores need no horizontal sums; where tokens read a whole block
 * at one rotation each (nearly every block of a session's workers), up to 4 of them are scored
 * together, each key pair loaded once for all their queries. The probabilities are exp(score -
 * max), normalised once at the end; the values summed by ``sum_paired`` for a class of several
 * tokens, by ``sum_widened`` for one. */
static inline __attribute__((always_inline)) void attend_class_bf16_g(const Layer *L, const int32_t *tokens,
                                                                      int num_tokens, int head, float *scratch,
                                                                      const int group, const int chunks) {
    const int d = 32 * chunks;
    Unit units[num_tokens];
    int32_t most = 0, most_queries = 0;
    for (int j = 0; j < num_tokens; j++) {
        units[j] = unit_of(L, tokens[j], head);
        most = units[j].count > most ? units[j].count : most;
        most_queries = units[j].query_count > most_queries ? units[j].query_count : most_queries;
    }
    /* scratch: per token its rounded queries, scores, probability pairs and sums; then one token's
     * rotated queries, and the block of transposed keys or of values */
    const size_t q_words = ((size_t)most_queries * group * d + 1) / 2, score_len = (size_t)most + LANES;
    const size_t pair_len = (size_t)most / 2 + 1, per_token = q_words + group * (score_len + pair_len + d);
    float *turned = scratch + per_token * num_tokens;
    __m512i *block = (__m512i *)(turned + (size_t)most_queries * group * d + 16);
    block = (__m512i *)(((uintptr_t)block + 63) & ~(uintptr_t)63);
    for (int j = 0; j < num_tokens; j++) {
        uint16_t *rounded = (uint16_t *)(scratch + per_token * j);
        rotate_queries(L, &units[j], turned, 0);
        for (size_t i = 0; i < (size_t)units[j].query_count * group * d; i++) rounded[i] = float_to_bf16(turned[i]);
    }
    const uint16_t *keys = (const uint16_t *)L->kv + (size_t)head * L->num_slots * d;
    const uint16_t *values = keys + (size_t)L->num_kv_heads * L->num_slots * d;
    const int32_t *slots = units[0].slots;
    for (int32_t first = 0; first < most; first += LANES) {
        const uint16_t *key[LANES];
        for (int i = 0; i < LANES; i++) {
            key[i] = keys + (size_t)slots[first + i < most ? first + i : first] * d;  /* past most: unused lanes */
            if (first + LANES + i < most)  /* the next block's keys on their way from memory */
                for (int line = 0; line < chunks; line++)
                    _mm_prefetch((const char *)(keys + (size_t)slots[first + LANES + i] * d + 32 * line), _MM_HINT_T0);
        }
        transpose_keys(key, chunks, block);
        int32_t j = 0;
        for (; j + 1 < num_tokens; j += 4) {  /* tokens that read the whole block at one rotation, 4 at a time */
            const int n = num_tokens - j < 4 ? num_tokens - j : 4;
            const uint32_t *q[4];
            float *at[4];
            int whole = 1;
            for (int t = 0; t < n && whole; t++) {
                const Unit *u = &units[j + t];
                const int32_t chosen = u->which == NULL ? 0 : u->which[first];
                whole = u->count - first >= LANES
                        && (u->which == NULL
                            || _mm512_cmpeq_epi32_mask(_mm512_loadu_si512((const void *)(u->which + first)), _mm512_set1_epi32(chosen)) == 0xFFFF);
                q[t] = (const uint32_t *)(scratch + per_token * (j + t)) + (size_t)chosen * group * d / 2;
                at[t] = scratch + per_token * (j + t) + q_words + first;
            }
            if (!whole) break;
            if (n == 4) score_keys_n(block, q, at, score_len, 4, group, chunks);
            else if (n == 3) score_keys_n(block, q, at, score_len, 3, group, chunks);
            else score_keys_n(block, q, at, score_len, 2, group, chunks);
        }
        for (; j < num_tokens; j++) {
            const int32_t n = units[j].count - first < LANES ? units[j].count - first : LANES, *which = units[j].which;
            if (n <= 0) continue;
            const uint32_t *rounded = (const uint32_t *)(scratch + per_token * j);
            float *scores = scratch + per_token * j + q_words + first;
            __mmask16 left = n == LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
            const __m512i choices = which == NULL ? _mm512_setzero_si512() : _mm512_maskz_loadu_epi32(left, which + first);
            while (left) {  /* once per rotation chosen in the block: almost always one */
                const int32_t chosen = which == NULL ? 0 : which[first + __builtin_ctz(left)];
                const __mmask16 lanes = _mm512_mask_cmpeq_epi32_mask(left, choices, _mm512_set1_epi32(chosen));
                score_keys(block, rounded + (size_t)chosen * group * d / 2, lanes, scores, score_len, group, chunks);
                left &= (__mmask16)~lanes;
            }
        }
    }
    float total[num_tokens][MAX_GROUP];
    const int paired = num_tokens > 1;
    for (int j = 0; j < num_tokens; j++) {  /* exp(score - max), normalised once at the end */
        float *scores = scratch + per_token * j + q_words;
        uint32_t *pairs = (uint32_t *)(scores + (size_t)group * score_len);
        const int32_t count = units[j].count;
        for (int g = 0; g < group; g++)
            total[j][g] = paired ? exp_pairs(scores + (size_t)g * score_len, count, (uint16_t *)(pairs + (size_t)g * pair_len))
                                 : exp_less_max(scores + (size_t)g * score_len, count);
        memset(pairs + (size_t)group * pair_len, 0, sizeof(float) * group * d);
    }
    float *first_sums = scratch + q_words + (size_t)group * (score_len + pair_len);
    if (paired)
        sum_paired(units, num_tokens, slots, values, most, block, scratch + q_words, per_token, score_len, pair_len, group, chunks);
    else
        sum_widened(units, slots, values, most, (__m512 *)block, scratch + q_words, first_sums, score_len, group, chunks);
    for (int j = 0; j < num_tokens; j++) {  /* the dimensions back in order, normalised */
        const float *sums = first_sums + per_token * j;
        float *acc = turned;
        for (int g = 0; g < group; g++) {
            const float inv = 1.0f / total[j][g];
            for (int c = 0; c < chunks; c++)
                for (int k = 0; k < 16; k++) {  /* sum c's halves: see sum_paired and sum_widened */
                    const int low = paired ? 8 * (k / 4) + k % 4 : 2 * k, high = paired ? low + 4 : low + 1;
                    acc[g * d + 32 * c + low] = sums[g * d + 32 * c + k] * inv;
                    acc[g * d + 32 * c + high] = sums[g * d + 32 * c + 16 + k] * inv;
                }
        }
        store_out(L, &units[j], acc);
    }
}

static void attend_class_bf16(const Layer *L, const int32_t *tokens, int n, int head, float *scratch) {
    attend_class_bf16_g(L, tokens, n, head, scratch, L->group, L->head_dim / 32);
}
static void attend_class_bf16_g3_d64(const Layer *L, const int32_t *tokens, int n, int head, float *scratch) {
    attend_class_bf16_g(L, tokens, n, head, scratch, 3, 2);
}
#endif

typedef void (*Attend)(const Layer *, const Unit *, float *);
typedef void (*AttendClass)(const Layer *, const int32_t *, int, int, float *);

static Attend pick(const Layer *L) {
#if defined(__AVX512F__)
    if (L->kv_bf16 && L->head_dim % 32 == 0 && L->head_dim <= 256 && L->group <= MAX_GROUP)
        return L->group == 3 && L->head_dim == 64 ? attend_avx512_g3_d64 : attend_avx512;
#endif
    return L->head_dim == 64 ? attend_plain_64 : L->head_dim == 128 ? attend_plain_128 : attend_plain;
}

static AttendClass pick_class(const Layer *L) {
#if defined(__AVX512BF16__)
    if (L->kv_bf16 && L->head_dim % 32 == 0 && L->head_dim <= 256 && L->group <= MAX_GROUP)
        return L->group == 3 && L->head_dim == 64 ? attend_class_bf16_g3_d64 : attend_class_bf16;
#endif
    (void)L;
    return NULL;
}

/* One layer's attention (see the file's comment). Returns 0, or -1 when a thread's scratch could not
 * be allocated (then ``out`` is not to be used). */
int paged_attention(const Layer *L) {
    const int num_classes = L->num_classes, num_kv_heads = L->num_kv_heads, group = L->group;
    const int head_dim = L->head_dim, max_queries = L->max_queries, max_count = L->max_count;
    const int max_class = L->max_class;
    const int32_t *class_tokens = L->class_tokens, *class_start = L->class_start;
    if (num_classes <= 0) return 0;  /* nothing to attend */
    const Attend attend = pick(L);
    const AttendClass attend_class = pick_class(L);
    const size_t per_token = (size_t)max_queries * group * head_dim + (size_t)group * (max_count + 8)
                             + (size_t)(group + 1) * head_dim;
    /* a class at once: its tokens' queries, scores and sums, one token's rotations, a block of keys or values */
    const size_t per_class = (size_t)max_class * ((size_t)max_queries * group * head_dim + (size_t)group * (max_count + 32 + max_count / 2 + 1 + head_dim))
                             + (size_t)max_queries * group * head_dim + 32 + (size_t)VALUE_BLOCK * head_dim;
    const size_t scratch = attend_class != NULL && per_class > per_token ? per_class : per_token;
    /* per (class, head), or per (token, head) where classes share nothing; classes cut into parts
     * when there are too few pairs to keep every thread busy */
    const int threads = L->num_threads > 0 ? L->num_threads : 1;
    const long pairs = (long)num_classes * num_kv_heads;
    int parts = attend_class == NULL ? 1 : pairs < 4L * threads ? (int)((4L * threads + pairs - 1) / pairs) : 1;
    parts = parts > max_class ? max_class : parts;
    const long num_units = attend_class == NULL ? (long)class_start[num_classes] * num_kv_heads : pairs * parts;
    int failed = 0;
#pragma omp parallel num_threads(threads)
    {
        float *buffer = malloc(sizeof(float) * scratch);
        if (buffer == NULL) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (long i = 0; i < num_units; i++) {
            const int head = (int)(i % num_kv_heads);
            if (buffer == NULL) continue;
            if (attend_class == NULL) {
                const Unit unit = unit_of(L, class_tokens[i / num_kv_heads], head);
                attend(L, &unit, buffer);
                continue;
            }
            const int c = (int)(i / ((long)parts * num_kv_heads)), part = (int)(i / num_kv_heads % parts);
            const int size = class_start[c + 1] - class_start[c];
            const int from = (int)((long)size * part / parts), to = (int)((long)size * (part + 1) / parts);
            if (to > from) attend_class(L, class_tokens + class_start[c] + from, to - from, head, buffer);
        }
        free(buffer);
    }
    return failed ? -1 : 0;
}
