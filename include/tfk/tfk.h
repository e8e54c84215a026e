/* tfk: SIMD transformer kernels for CPUs. The C API.
 *
 * Conventions for every function below:
 *  - Matrices are fp32, row-major, [rows, cols] with a leading dimension
 *    (row stride, in elements) ld >= cols. Float pointers need only float
 *    (4-byte) alignment; tfk_rope's positions and the batched forwards'
 *    caches array need their element type's (int64_t, a pointer).
 *  - Every function returns a tfk_status (except the destroy functions, the
 *    getters and tfk_last_error). Arguments are checked before anything is
 *    written: on TFK_INVALID_ARGUMENT or TFK_UNSUPPORTED_ISA nothing the
 *    caller owns has been written, and tfk_last_error() names the offending
 *    argument. TFK_OUT_OF_MEMORY (a create, or a kernel's first per-thread
 *    scratch allocation failing) may leave outputs partly written.
 *  - Zero sizes are an error (they are almost always a bug in the caller).
 *  - "In place" means the output pointer equals the input pointer with the
 *    same leading dimension; any other overlap of input and output is an
 *    error, where each matrix spans from its first element to its last
 *    (rows interleaved in one strided buffer count as overlapping).
 *  - All functions are thread-safe: concurrent calls on different outputs are
 *    correct. Results are bitwise identical for any number of threads.
 *  - Each kernel call picks its SIMD target (ISA) once, the best the CPU
 *    supports below the cap set by tfk_set_max_isa() or TFK_MAX_ISA. A
 *    layer's forward (MHA, FFN, block) is several kernel calls, each
 *    picking its own: a cap changed meanwhile applies to its later ones.
 *  - The caller's floating-point environment does not change results: each
 *    call computes with round to nearest, subnormals kept (no FTZ/DAZ) and
 *    every exception masked, on its thread and on the workers that help it,
 *    and leaves each thread's rounding, flush and trap settings as they
 *    were. Exception flags it raises are unspecified.
 * Numerical conventions and measured errors: docs/numerics.md. */
#ifndef TFK_TFK_H_
#define TFK_TFK_H_

#include <stddef.h>
#include <stdint.h>

#if defined(TFK_STATIC_DEFINE)
#define TFK_API
#elif defined(_WIN32)
#ifdef TFK_BUILDING
#define TFK_API __declspec(dllexport)
#else
#define TFK_API __declspec(dllimport)
#endif
#else
#define TFK_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define TFK_VERSION_MAJOR 0
#define TFK_VERSION_MINOR 1
#define TFK_VERSION_PATCH 0

/* ---- Status and errors ------------------------------------------------ */

typedef enum tfk_status {
  TFK_SUCCESS = 0,
  TFK_INVALID_ARGUMENT = 1, /* null pointer, bad size, stride or enum */
  TFK_UNSUPPORTED_ISA = 2,  /* ISA not compiled in or not on this CPU */
  TFK_OUT_OF_MEMORY = 3,
  TFK_INTERNAL_ERROR = 4
} tfk_status;

/* Static string for a status, e.g. "invalid argument". */
TFK_API const char* tfk_status_string(tfk_status status);

/* Message of the last call on the calling thread that returned a tfk_status,
 * naming the argument if it failed ("tfk_softmax: leading dimension of x (3)
 * < cols (4)"); "" after a success or before any such call. Getters leave it
 * as it is. Valid until the next tfk call on this thread. */
TFK_API const char* tfk_last_error(void);

/* "MAJOR.MINOR.PATCH" of the library that is linked. */
TFK_API const char* tfk_version(void);

/* ---- ISA (SIMD target) selection -------------------------------------- */

/* The targets compiled into this build, best first (e.g. "AVX3", "AVX2",
 * "SSE4"). tfk_isa_name returns NULL for i >= tfk_isa_count(). */
TFK_API size_t tfk_isa_count(void);
TFK_API const char* tfk_isa_name(size_t i);

/* 1 if `name` is compiled in and this CPU can run it, else 0. */
TFK_API int tfk_isa_supported(const char* name);

/* Caps the ISA of every later tfk call in this process at `name` (this
 * library only: other users of Highway in the process are not affected).
 * NULL, "" or "best" removes the cap. Names are case-insensitive; "AVX512"
 * is accepted for "AVX3". An unknown name is TFK_INVALID_ARGUMENT; a name
 * that is not compiled in or that the CPU lacks is TFK_UNSUPPORTED_ISA, and
 * the cap is left unchanged. The environment variable TFK_MAX_ISA sets the
 * initial cap the same way. */
TFK_API tfk_status tfk_set_max_isa(const char* name);

/* The target that calls made now run on. While another thread changes the
 * cap, it may name the target of either cap. */
TFK_API const char* tfk_active_isa(void);

/* ---- Threads ---------------------------------------------------------- */

/* tfk runs its parallel loops with oneTBB in the task arena of the calling
 * thread (a host's tbb::task_arena, or TBB's default arena). n > 0 splits
 * each call into at most n tasks (n = 1: everything on the calling thread);
 * n = 0 (default) uses the arena's concurrency. Either way a call takes at
 * most 1024 tasks. The environment variable TFK_NUM_THREADS sets the
 * initial value. n < 0 is TFK_INVALID_ARGUMENT. */
TFK_API tfk_status tfk_set_num_threads(int n);

/* The number of tasks a large call is split into now (at most 1024). */
TFK_API int tfk_get_num_threads(void);

/* ---- Softmax ---------------------------------------------------------- */

typedef enum tfk_mask {
  TFK_MASK_NONE = 0,
  /* x is a stack of [q_len, cols] score blocks (kv_len = cols); row i of a
   * block sees columns j <= cols - q_len + i (bottom-right aligned). */
  TFK_MASK_CAUSAL = 1
} tfk_mask;

/* y[r, :] = softmax(scale * x[r, :]) over the cols entries of each row,
 * computed stably as exp(scale*x - max) / sum. Special values are decided
 * on the scaled entries scale*x: those that are -inf (or masked) give 0; a
 * row whose unmasked entries are all -inf gives zeros (also when every
 * finite x overflows to -inf once scaled); a row with an unmasked NaN or
 * +inf gives NaN, whatever else it holds (so with scale < 0 an x of -inf
 * makes the row NaN and one of +inf gives 0; scale = 0 makes an infinite x
 * NaN). Masked entries are never read. With TFK_MASK_CAUSAL, rows must be a
 * multiple of q_len and masked entries of y are written as 0; q_len is
 * ignored for TFK_MASK_NONE. scale must be finite. In place allowed. */
TFK_API tfk_status tfk_softmax(size_t rows, size_t cols, const float* x,
                               size_t ldx, float* y, size_t ldy, float scale,
                               tfk_mask mask, size_t q_len);

/* ---- Activations ------------------------------------------------------ */

typedef enum tfk_activation {
  TFK_ACT_NONE = 0,      /* identity: only for matmul epilogues */
  TFK_ACT_RELU = 1,      /* max(x, 0); NaN stays NaN */
  TFK_ACT_GELU_ERF = 2,  /* 0.5 x (1 + erf(x / sqrt 2)) */
  TFK_ACT_GELU_TANH = 3, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
  TFK_ACT_SILU = 4       /* x sigmoid(x) (swish; the gate of SwiGLU) */
} tfk_activation;

/* y = act(x) elementwise over [rows, cols] (act is not TFK_ACT_NONE). In
 * place allowed. */
TFK_API tfk_status tfk_activate(tfk_activation act, size_t rows, size_t cols,
                                const float* x, size_t ldx, float* y,
                                size_t ldy);

/* ---- Normalisation and residual add ----------------------------------- */

/* y = (x - mean) / sqrt(var + eps) * gamma + beta per row, var the biased
 * (1/cols) variance. gamma and beta are [cols] or NULL (1 and 0). eps >= 0
 * and finite. In place allowed. */
TFK_API tfk_status tfk_layernorm(size_t rows, size_t cols, const float* x,
                                 size_t ldx, const float* gamma,
                                 const float* beta, float eps, float* y,
                                 size_t ldy);

/* y = x / sqrt(mean(x^2) + eps) * gamma per row; gamma is [cols] or NULL.
 * eps >= 0 and finite. In place allowed. */
TFK_API tfk_status tfk_rmsnorm(size_t rows, size_t cols, const float* x,
                               size_t ldx, const float* gamma, float eps,
                               float* y, size_t ldy);

/* y = a + b over [rows, cols]; y may be a or b (in place). */
TFK_API tfk_status tfk_add(size_t rows, size_t cols, const float* a,
                           size_t lda, const float* b, size_t ldb, float* y,
                           size_t ldy);

/* ---- Rotary position embedding (RoPE) --------------------------------- */

typedef enum tfk_rope_pairing {
  /* rotates pairs (x[2i], x[2i+1]): GPT-J, RoFormer */
  TFK_ROPE_INTERLEAVED = 0,
  /* rotates pairs (x[i], x[i + rotary_dim/2]): GPT-NeoX, Llama */
  TFK_ROPE_HALF = 1
} tfk_rope_pairing;

/* Rotates x in place. x is [tokens, heads, head_dim]: element (t, h, k) is
 * x[t*ldx + h*head_dim + k], ldx >= heads*head_dim (so Q or K inside a fused
 * QKV row can be rotated where it lies). Pair i < rotary_dim/2 of a token at
 * position p turns by the angle p * base^(-2i/rotary_dim); dims from
 * rotary_dim to head_dim are untouched. rotary_dim is even, 2..head_dim;
 * base > 1 and finite. The position of token t is positions[t] if
 * positions is not NULL (it must not overlap x), else pos_start + t
 * (pos_start + tokens - 1 must fit int64_t). rotary_dim <= 1024.
 * Angles are reduced in double precision, so the error does not grow with
 * the position up to |position| 2^31; past it the angle's rounding in double
 * (2^-53 |angle| radians) grows with it (docs/numerics.md). */
TFK_API tfk_status tfk_rope(size_t tokens, size_t heads, size_t head_dim,
                            size_t rotary_dim, tfk_rope_pairing pairing,
                            double base, float* x, size_t ldx,
                            int64_t pos_start, const int64_t* positions);

/* ---- Matrix multiplication ------------------------------------------- */

typedef enum tfk_layout {
  TFK_LAYOUT_KN = 0, /* B stored [K, N], row-major: C = A B */
  TFK_LAYOUT_NK = 1  /* B stored [N, K] (PyTorch/Hugging Face [out, in]
                        weights): C = A B^T */
} tfk_layout;

/* C[M,N] = alpha * A[M,K] op(B) + beta * C, row-major, leading dimensions
 * lda >= K, ldb >= N (KN) or >= K (NK), ldc >= N. Any M, N, K >= 1; alpha
 * and beta finite. C must not overlap A or B. beta = 0 does not read C
 * (NaN there is ignored); alpha = 0 reads neither A nor B (C = beta C, +0
 * where beta = 0). Each
 * C element is one sequential FMA chain over k = 0..K-1, so results are
 * identical for any thread count and equal, bit for bit, to tfk_linear with
 * the same B. Error: |C - C_exact| <= K u |alpha| (|A||B|)_ij (2 K u on
 * SSE4, which has no FMA) + rounding of the alpha/beta step, plus products
 * in the subnormal range rounded there (docs/matmul.md). */
TFK_API tfk_status tfk_matmul(size_t M, size_t N, size_t K, float alpha,
                              const float* A, size_t lda, const float* B,
                              size_t ldb, tfk_layout b_layout, float beta,
                              float* C, size_t ldc);

/* A linear layer with weights packed once: Y = R + act(X W + bias).
 * W is [K, N] (TFK_LAYOUT_KN) or [N, K] (TFK_LAYOUT_NK) with leading
 * dimension ldw; bias is [N] or NULL; act is any tfk_activation (NONE for
 * none). The handle owns a packed copy of W and bias; the caller's arrays
 * can be freed after create. A handle is immutable: forward may run on it
 * from many threads at once. Packed weights of 2 MiB and more are advised
 * to the kernel as transparent huge pages (Linux; TFK_HUGE_PAGES=0 turns
 * that off), as are KV caches. */
typedef struct tfk_linear tfk_linear;

TFK_API tfk_status tfk_linear_create(tfk_linear** out, size_t K, size_t N,
                                     const float* W, size_t ldw,
                                     tfk_layout layout, const float* bias,
                                     tfk_activation act);

/* Y[M,N] = R + act(X[M,K] W + bias); R is [M,N] (ldr) or NULL. Y may be R
 * (in place residual add) but must not overlap X. Per-thread scratch only
 * grows (docs/design.md), so a thread that has run a call of this M with as
 * many threads allocates nothing for it again; a call of another M may need
 * more (on AVX-512 a decoding call, M <= 14, copies all of K at once where
 * taller ones work in blocks of K), and the thread count decides how A is
 * packed. */
TFK_API tfk_status tfk_linear_forward(const tfk_linear* layer, size_t M,
                                      const float* X, size_t ldx, float* Y,
                                      size_t ldy, const float* R, size_t ldr);

/* K, N and the bytes the handle holds; any pointer may be NULL. */
TFK_API tfk_status tfk_linear_info(const tfk_linear* layer, size_t* K,
                                   size_t* N, size_t* bytes);

/* Frees the handle; NULL is ignored. */
TFK_API void tfk_linear_destroy(tfk_linear* layer);

/* ---- Attention -------------------------------------------------------- */

/* Scaled dot-product attention, per head h:
 *   O_h = softmax(scale * Q_h K_g^T + mask) V_g,  g = h / (n_heads/n_kv_heads)
 * Q is [q_len, n_heads, head_dim]: element (t, h, k) at Q[t*ldq + h*head_dim
 * + k], ldq >= n_heads*head_dim; K and V are [kv_len, n_kv_heads, head_dim]
 * likewise (ldk, ldv), so Q, K and V can be column ranges of one fused QKV
 * projection; O is [q_len, n_heads, head_dim] (ldo), the heads concatenated.
 * n_heads is a multiple of n_kv_heads (grouped-query / multi-query
 * attention); head_dim <= 256; q_len, kv_len <= 2^31 - 1; scale finite,
 * 0 selecting 1/sqrt(head_dim). Q enters as scale*Q rounded to float, so an
 * element whose product overflows makes its query's row NaN.
 * TFK_MASK_CAUSAL is bottom-right aligned: query t sits at position
 * kv_len - q_len + t and sees keys j <= kv_len - q_len + t; a query that sees
 * no key (q_len > kv_len), or whose scores are all -inf, gets zeros. The
 * q_len x kv_len score matrix is never formed (flash-style tiles with an
 * online softmax, docs/attention.md). A
 * NaN or +inf score makes its query's row NaN. A masked key's score never
 * reaches a query, but its value row may: where more than 16 queries share a
 * KV head (n_heads/n_kv_heads x q_len), a non-finite value at a key that a
 * query does not see, next to keys it does, can make that query's row NaN
 * (weight 0 times inf). Likewise a key whose score is -inf has weight 0,
 * which times a non-finite value is NaN: that reaches the row unless every
 * key of the block the kernel takes it in (64 to 512 keys, by shape) has
 * weight 0, so it depends on the shape, never on the thread count. The
 * value sums are formed before the division by
 * the softmax total, as in flash attention: they stay finite while kv_len x
 * max |V| is below FLT_MAX, and may overflow to inf beyond. O may be Q
 * (same ldq) but must not overlap K or V. Error: docs/numerics.md. */
TFK_API tfk_status tfk_attention(size_t q_len, size_t kv_len, size_t n_heads,
                                 size_t n_kv_heads, size_t head_dim,
                                 const float* Q, size_t ldq, const float* K,
                                 size_t ldk, const float* V, size_t ldv,
                                 float* O, size_t ldo, float scale,
                                 tfk_mask mask);

/* ---- KV cache --------------------------------------------------------- */

typedef enum tfk_dtype {
  TFK_DTYPE_F32 = 0,
  /* bfloat16, rounded to nearest even on append: half the bytes to read per
   * decoding step, 8 significant bits (relative error <= 2^-8 per value;
   * finite values of magnitude >= ~3.3962e38, past bfloat16's largest,
   * become inf). */
  TFK_DTYPE_BF16 = 1
} tfk_dtype;

/* The keys and values of one attention layer: capacity tokens of
 * n_kv_heads x head_dim each (head_dim <= 256, capacity <= 2^31 - 1),
 * stored per head so each decoding step reads them as long sequential
 * streams. */
typedef struct tfk_kv_cache tfk_kv_cache;

TFK_API tfk_status tfk_kv_cache_create(tfk_kv_cache** out, size_t capacity,
                                       size_t n_kv_heads, size_t head_dim,
                                       tfk_dtype dtype);

/* Appends `tokens` tokens: K and V are [tokens, n_kv_heads, head_dim] with
 * leading dimensions ldk, ldv >= n_kv_heads*head_dim (e.g. inside a fused
 * QKV row, after RoPE). Fails, appending nothing, if length + tokens >
 * capacity. */
TFK_API tfk_status tfk_kv_cache_append(tfk_kv_cache* cache, size_t tokens,
                                       const float* K, size_t ldk,
                                       const float* V, size_t ldv);

/* tfk_attention of q_len (<= 2^31 - 1) new queries against every cached
 * token (kv_len = the cache length, so append the new tokens' K and V
 * first; with TFK_MASK_CAUSAL query t sees the cached tokens up to its own
 * position length - q_len + t). n_heads is a multiple of the cache's
 * n_kv_heads; scale as for tfk_attention. */
TFK_API tfk_status tfk_kv_cache_attention(const tfk_kv_cache* cache,
                                          size_t q_len, size_t n_heads,
                                          const float* Q, size_t ldq,
                                          float* O, size_t ldo, float scale,
                                          tfk_mask mask);

/* Forgets every token from `length` on (length <= the current length), e.g.
 * to start a new sequence (0) or to drop rejected draft tokens. */
TFK_API tfk_status tfk_kv_cache_truncate(tfk_kv_cache* cache, size_t length);

/* Current length, capacity and bytes held; any pointer may be NULL. */
TFK_API tfk_status tfk_kv_cache_info(const tfk_kv_cache* cache,
                                     size_t* length, size_t* capacity,
                                     size_t* bytes);

/* Frees the cache; NULL is ignored. A cache may be read by many
 * tfk_kv_cache_attention calls at once, but not while it is appended to or
 * truncated. */
TFK_API void tfk_kv_cache_destroy(tfk_kv_cache* cache);

/* ---- Transformer layer: multi-head attention, FFN, block --------------- */

/* Weights below are dense: [in, out] with TFK_LAYOUT_KN (y = x W, as in
 * "Attention Is All You Need") or [out, in] with TFK_LAYOUT_NK (y = x W^T,
 * PyTorch / Hugging Face checkpoints). create copies and packs them (the
 * caller's arrays can be freed afterwards); a handle is then immutable, and
 * forward may run on it from many threads at once, each with its own
 * workspace and KV cache. forward works in a caller's workspace of at least
 * *_workspace_size(n) bytes (any alignment), plus the kernels' per-thread
 * scratch, allocated on a thread's first use and reused after. In
 * every forward, Y may be X or R (in place) but must not otherwise overlap
 * them, and the workspace must not overlap any of them. */

typedef struct tfk_mha_config {
  size_t d_model;     /* width of X and Y, <= 2^24 */
  size_t n_heads;     /* query heads, <= 2^16 */
  size_t n_kv_heads;  /* key/value heads: n_heads (MHA), fewer (GQA), 1 (MQA) */
  size_t head_dim;    /* 0: d_model / n_heads */
  tfk_layout layout;  /* of all four weights */
  const float* wq;    /* d_model -> n_heads * head_dim */
  const float* wk;    /* d_model -> n_kv_heads * head_dim */
  const float* wv;    /* d_model -> n_kv_heads * head_dim */
  const float* wo;    /* n_heads * head_dim -> d_model */
  const float* bq;    /* biases, or NULL */
  const float* bk;
  const float* bv;
  const float* bo;
  int causal;         /* 1: causal self-attention (decoders) */
  int rope;           /* 1: rotary embedding on Q and K (tfk_rope) */
  tfk_rope_pairing rope_pairing;
  size_t rope_dim;    /* rotated dims per head; 0: head_dim */
  double rope_base;   /* 0: 10000 */
  float scale;        /* finite; 0: 1 / sqrt(head_dim) */
} tfk_mha_config;

typedef struct tfk_mha tfk_mha;

TFK_API tfk_status tfk_mha_create(tfk_mha** out, const tfk_mha_config* config);

TFK_API tfk_status tfk_mha_workspace_size(const tfk_mha* mha, size_t n,
                                          size_t* bytes);

/* Y[n, d_model] = R + MHA(X[n, d_model]) (R is [n, d_model] or NULL):
 * Q, K, V = X W + b in one fused projection, RoPE on Q and K at positions
 * p0 .. p0 + n - 1, attention per head (tfk_attention; the heads' outputs
 * land side by side, so concatenation is free), then the output projection
 * with the residual fused. Without a cache (NULL) attention is over the n
 * tokens and p0 = 0. With one, the n tokens' K and V are appended to it
 * first, attention covers everything cached, and p0 is the cache's length
 * before the call: one decoding step of one token is one call. The cache
 * must match n_kv_heads and head_dim and have room for n more tokens. On
 * any error (tfk_block_forward's too) the cache keeps its length from
 * before the call, so the same tokens can be run again; after
 * TFK_OUT_OF_MEMORY an in-place call (Y == X or Y == R) may have overwritten
 * its input with partial results. Non-finite values follow tfk_attention:
 * with causal attention over more than 16 queries per KV head at once, a
 * NaN or inf value of a later token can reach earlier tokens' rows, which
 * a token-by-token run with a cache keeps finite. */
TFK_API tfk_status tfk_mha_forward(const tfk_mha* mha, size_t n,
                                   const float* X, size_t ldx, float* Y,
                                   size_t ldy, const float* R, size_t ldr,
                                   tfk_kv_cache* cache, void* workspace,
                                   size_t workspace_bytes);

/* Batched decoding: one new token of each of n sequences, each with its own
 * KV cache. Row i of X is the next token of the sequence cached in
 * caches[i] (n distinct caches, each with room for one more token): it is
 * appended there at position = that cache's length, and attends to that
 * cache alone. The projections run once over the n rows, so the weights are
 * read once a step for all sequences instead of once for each; rows
 * equal, bit for bit, n tfk_mha_forward calls of one token with the same
 * caches. Errors and the caches' lengths on failure as tfk_mha_forward;
 * the workspace is tfk_mha_workspace_size(n). The caches array (n
 * pointers) is read throughout the call, so it must not overlap Y or the
 * workspace (an error). */
TFK_API tfk_status tfk_mha_forward_batch(const tfk_mha* mha, size_t n,
                                         const float* X, size_t ldx, float* Y,
                                         size_t ldy, const float* R, size_t ldr,
                                         tfk_kv_cache* const* caches,
                                         void* workspace,
                                         size_t workspace_bytes);

TFK_API void tfk_mha_destroy(tfk_mha* mha);

typedef struct tfk_ffn_config {
  size_t d_model, d_ff; /* each <= 2^24 */
  tfk_activation act; /* RELU, GELU_ERF, GELU_TANH or SILU */
  /* 0: act(x W1 + b1) W2 + b2;
   * 1: (act(x W1 + b1) * (x W3 + b3)) W2 + b2 (SwiGLU with SILU, GeGLU with
   *    GELU: Llama, Mistral, Gemma). */
  int gated;
  tfk_layout layout;
  const float* w1; /* d_model -> d_ff */
  const float* w3; /* d_model -> d_ff, gated only */
  const float* w2; /* d_ff -> d_model */
  const float* b1; /* biases, or NULL */
  const float* b3;
  const float* b2;
} tfk_ffn_config;

typedef struct tfk_ffn tfk_ffn;

TFK_API tfk_status tfk_ffn_create(tfk_ffn** out, const tfk_ffn_config* config);
TFK_API tfk_status tfk_ffn_workspace_size(const tfk_ffn* ffn, size_t n,
                                          size_t* bytes);
/* Y = R + FFN(X), X and Y [n, d_model], R [n, d_model] or NULL. Ungated,
 * the activation is fused into the first projection's store; gated, the
 * fused [W1 | W3] projection is stored as it is and act(G1) * G3 is one
 * pass over it. The residual is fused into the second projection's store. */
TFK_API tfk_status tfk_ffn_forward(const tfk_ffn* ffn, size_t n,
                                   const float* X, size_t ldx, float* Y,
                                   size_t ldy, const float* R, size_t ldr,
                                   void* workspace, size_t workspace_bytes);
TFK_API void tfk_ffn_destroy(tfk_ffn* ffn);

typedef enum tfk_norm_kind {
  TFK_NORM_LAYER = 0, /* tfk_layernorm (gamma, beta) */
  TFK_NORM_RMS = 1    /* tfk_rmsnorm (gamma) */
} tfk_norm_kind;

typedef struct tfk_block_config {
  tfk_mha_config attn;
  tfk_ffn_config ffn; /* ffn.d_model = attn.d_model */
  /* 0: pre-LN,  h = x + MHA(N1(x)),  y = h + FFN(N2(h))  (GPT-2, Llama);
   * 1: post-LN, h = N1(x + MHA(x)),  y = N2(h + FFN(h))  (the original
   *    Transformer, BERT). */
  int post_ln;
  tfk_norm_kind norm;
  const float* norm1_gamma; /* [d_model] or NULL (1) */
  const float* norm1_beta;  /* [d_model] or NULL (0); LayerNorm only */
  const float* norm2_gamma;
  const float* norm2_beta;
  float eps;
} tfk_block_config;

typedef struct tfk_block tfk_block;

TFK_API tfk_status tfk_block_create(tfk_block** out,
                                    const tfk_block_config* config);
TFK_API tfk_status tfk_block_workspace_size(const tfk_block* block, size_t n,
                                            size_t* bytes);
/* Y = block(X) for n tokens, X and Y [n, d_model] (Y may be X); cache as in
 * tfk_mha_forward (NULL for a whole sequence at once). */
TFK_API tfk_status tfk_block_forward(const tfk_block* block, size_t n,
                                     const float* X, size_t ldx, float* Y,
                                     size_t ldy, tfk_kv_cache* cache,
                                     void* workspace, size_t workspace_bytes);
/* Batched decoding through the block: row i of X is the next token of the
 * sequence cached in caches[i], as in tfk_mha_forward_batch; equal, bit for
 * bit, to n tfk_block_forward calls of one token. Workspace:
 * tfk_block_workspace_size(n); the caches array must not overlap Y or it. */
TFK_API tfk_status tfk_block_forward_batch(const tfk_block* block, size_t n,
                                           const float* X, size_t ldx, float* Y,
                                           size_t ldy,
                                           tfk_kv_cache* const* caches,
                                           void* workspace,
                                           size_t workspace_bytes);
TFK_API void tfk_block_destroy(tfk_block* block);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TFK_TFK_H_ */
