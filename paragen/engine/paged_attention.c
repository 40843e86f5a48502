/* Attention of query tokens over lists of cache slots, each key scored by a query of its own choosing.
 *
 * Built by paragen/engine/fused.py (gcc -O3 -march=native -ffast-math -fopenmp, on the machine that
 * runs it) and called through ctypes with the raw pointers of contiguous CPU tensors; one call is one
 * layer of a forward.
 *
 * A layer's cache is [2 * num_kv_heads, num_slots, head_dim] (K heads, then V heads). Token t reads
 * the keys at key_slots[key_start[t] .. key_start[t] + key_count[t]); key i is scored by the query
 * queries[query_base[t] + key_query[i]] ([.., num_heads, head_dim], fp32): a Hogwild! view's
 * segments are read at shifts of their own, one rotated query per shift; a plain decode has one.
 * Scores, softmax and the value sum are fp32 whatever the cache's dtype. The (token, kv head) pairs
 * are shared out over OpenMP threads (torch's own runtime: both load libgomp.so.1).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    const void *kv;
    long num_slots;
    int num_kv_heads, group, head_dim;
    float scale;
    const float *queries;
    const int32_t *key_slots, *key_query;
} Layer;

static inline float bf16_to_float(uint16_t x) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)x << 16;
    return v.f;
}

static inline float f32_to_float(float x) { return x; }

/* One token's queries of one kv head (group of them) against its keys; scratch: group * count scores
 * and (group + 1) * D floats. DIM is the head size when known at compile time (0: layer->head_dim). */
#define ATTEND_UNIT(NAME, ELEM, LOAD, DIM)                                                             \
    static void NAME(const Layer *layer, int32_t start, int32_t count, int32_t query_base, int h,     \
                     float *scores, float *out) {                                                     \
        const int d = DIM ? DIM : layer->head_dim, group = layer->group;                              \
        const size_t heads_stride = (size_t)layer->num_kv_heads * group * d;                          \
        const ELEM *keys = (const ELEM *)layer->kv + (size_t)h * layer->num_slots * d;                \
        const ELEM *values = keys + (size_t)layer->num_kv_heads * layer->num_slots * d;               \
        const int32_t *slots = layer->key_slots + start, *which = layer->key_query + start;           \
        float *row = scores + (size_t)group * count, *acc = row + d;                                  \
        for (int32_t i = 0; i < count; i++) {                                                          \
            const ELEM *k = keys + (size_t)slots[i] * d;                                              \
            for (int j = 0; j < d; j++) row[j] = LOAD(k[j]);                                           \
            const float *q = layer->queries + (size_t)(query_base + which[i]) * heads_stride          \
                             + (size_t)h * group * d;                                                  \
            for (int g = 0; g < group; g++) {                                                          \
                float dot = 0.0f;                                                                      \
                for (int j = 0; j < d; j++) dot += q[g * d + j] * row[j];                              \
                scores[(size_t)g * count + i] = dot * layer->scale;                                    \
            }                                                                                          \
        }                                                                                              \
        for (int g = 0; g < group; g++) {                                                              \
            float *s = scores + (size_t)g * count, top = -INFINITY, total = 0.0f;                      \
            for (int32_t i = 0; i < count; i++) top = s[i] > top ? s[i] : top;                         \
            for (int32_t i = 0; i < count; i++) {                                                      \
                s[i] = expf(s[i] - top);                                                               \
                total += s[i];                                                                         \
            }                                                                                          \
            const float inv = 1.0f / total;                                                            \
            for (int32_t i = 0; i < count; i++) s[i] *= inv;                                           \
        }                                                                                              \
        for (int j = 0; j < group * d; j++) acc[j] = 0.0f;                                             \
        for (int32_t i = 0; i < count; i++) {                                                          \
            const ELEM *v = values + (size_t)slots[i] * d;                                            \
            for (int j = 0; j < d; j++) row[j] = LOAD(v[j]);                                           \
            for (int g = 0; g < group; g++) {                                                          \
                const float p = scores[(size_t)g * count + i];                                         \
                for (int j = 0; j < d; j++) acc[g * d + j] += p * row[j];                              \
            }                                                                                          \
        }                                                                                              \
        for (int j = 0; j < group * d; j++) out[(size_t)h * group * d + j] = acc[j];                   \
    }

ATTEND_UNIT(attend_f32, float, f32_to_float, 0)
ATTEND_UNIT(attend_bf16, uint16_t, bf16_to_float, 0)
ATTEND_UNIT(attend_f32_d64, float, f32_to_float, 64)
ATTEND_UNIT(attend_bf16_d64, uint16_t, bf16_to_float, 64)

typedef void (*Unit)(const Layer *, int32_t, int32_t, int32_t, int, float *, float *);

/* Returns 0, or -1 when a thread's scratch could not be allocated (then ``out`` is not to be used). */
int paged_attention(const void *kv, int is_bf16, long num_slots, int num_kv_heads, int group, int head_dim,
                    float scale, const float *queries, const int32_t *key_slots, const int32_t *key_query,
                    const int32_t *key_start, const int32_t *key_count, const int32_t *query_base,
                    int num_tokens, int max_count, int num_threads, float *out) {
    const Layer layer = {kv, num_slots, num_kv_heads, group, head_dim, scale, queries, key_slots, key_query};
    const Unit unit = head_dim == 64 ? (is_bf16 ? attend_bf16_d64 : attend_f32_d64)
                                     : (is_bf16 ? attend_bf16 : attend_f32);
    const size_t scratch = (size_t)group * (max_count > 0 ? max_count : 1) + (size_t)(group + 1) * head_dim;
    const long num_units = (long)num_tokens * num_kv_heads;
    int failed = 0;
#pragma omp parallel num_threads(num_threads > 0 ? num_threads : 1)
    {
        float *scores = malloc(sizeof(float) * scratch);
        if (scores == NULL) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (long u = 0; u < num_units; u++) {
            const int t = (int)(u / num_kv_heads), h = (int)(u % num_kv_heads);
            if (scores != NULL)
                unit(&layer, key_start[t], key_count[t], query_base[t], h, scores,
                     out + (size_t)t * num_kv_heads * group * head_dim);
        }
        free(scores);
    }
    return failed ? -1 : 0;
}
