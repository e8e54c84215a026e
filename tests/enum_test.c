/* Enum arguments outside their enumerators, as a C caller can pass them:
 * every entry point that takes an enum (as an argument or a config field)
 * refuses the value with TFK_INVALID_ARGUMENT, a message that names the
 * argument and its value, and writes nothing. Written in C, where an enum
 * object may hold any value of its compatible integer type; in C++ such a
 * value is undefined (UBSan's enum check stops at it). */
#include <stdio.h>
#include <string.h>
#include <tfk/tfk.h>

static int failures = 0;

/* Checks the status, the message and that out[0..n) still holds 42.5. */
static void Expect(const char* what, tfk_status got, const char* needle, const float* out,
                   size_t n) {
  const char* msg = tfk_last_error();
  if (got != TFK_INVALID_ARGUMENT) {
    fprintf(stderr, "FAIL %s: status %d, want TFK_INVALID_ARGUMENT\n", what, (int)got);
    ++failures;
  }
  if (strstr(msg, needle) == NULL) {
    fprintf(stderr, "FAIL %s: message '%s' lacks '%s'\n", what, msg, needle);
    ++failures;
  }
  for (size_t i = 0; i < n; ++i) {
    if (out[i] != 42.5f) {
      fprintf(stderr, "FAIL %s: output written on error\n", what);
      ++failures;
      return;
    }
  }
  printf("ok %s: %s\n", what, msg);
}

int main(void) {
  enum { kN = 256 };
  float x[kN], y[kN], w[kN];
  for (int i = 0; i < kN; ++i) x[i] = 1.0f, y[i] = 42.5f, w[i] = 0.5f;

  Expect("softmax mask", tfk_softmax(2, 4, x, 4, y, 4, 1.0f, (tfk_mask)7, 0), "mask (7)", y, kN);
  Expect("activate act", tfk_activate((tfk_activation)9, 1, 4, x, 4, y, 4), "act (9)", y, kN);
  Expect("rope pairing",
         tfk_rope(1, 1, 8, 8, (tfk_rope_pairing)5, 1e4, y, 8, 0, NULL), "pairing (5)", y, kN);
  Expect("attention mask",
         tfk_attention(2, 2, 1, 1, 8, x, 8, w, 8, w, 8, y, 8, 0.0f, (tfk_mask)-1), "mask (-1)", y,
         kN);
  Expect("matmul layout",
         tfk_matmul(2, 4, 4, 1.0f, x, 4, w, 4, (tfk_layout)7, 0.0f, y, 4), "layout (7)", y, kN);

  tfk_linear* lin = (tfk_linear*)0x1;  /* left as it is on error */
  Expect("linear_create layout",
         tfk_linear_create(&lin, 4, 4, w, 4, (tfk_layout)2, NULL, TFK_ACT_NONE), "layout (2)", y,
         0);
  Expect("linear_create act", tfk_linear_create(&lin, 4, 4, w, 4, TFK_LAYOUT_KN, NULL,
                                                (tfk_activation)-3),
         "act (-3)", y, 0);
  tfk_kv_cache* cache = (tfk_kv_cache*)0x1;
  Expect("kv_cache_create dtype", tfk_kv_cache_create(&cache, 4, 1, 8, (tfk_dtype)5), "dtype (5)",
         y, 0);
  if (lin != (tfk_linear*)0x1 || cache != (tfk_kv_cache*)0x1) {
    fprintf(stderr, "FAIL a create wrote *out on error\n");
    ++failures;
  }

  /* A valid cache, then its attention with a bad mask. */
  tfk_kv_cache* kv = NULL;
  if (tfk_kv_cache_create(&kv, 4, 1, 8, TFK_DTYPE_F32) != TFK_SUCCESS ||
      tfk_kv_cache_append(kv, 1, w, 8, w, 8) != TFK_SUCCESS) {
    fprintf(stderr, "FAIL kv cache setup: %s\n", tfk_last_error());
    return 1;
  }
  Expect("kv_cache_attention mask",
         tfk_kv_cache_attention(kv, 1, 1, x, 8, y, 8, 0.0f, (tfk_mask)3), "mask (3)", y, kN);
  tfk_kv_cache_destroy(kv);

  /* Config fields: d_model 8, one head of 8, FFN 8 -> 8. */
  tfk_mha_config mha;
  memset(&mha, 0, sizeof(mha));
  mha.d_model = 8, mha.n_heads = 1, mha.n_kv_heads = 1;
  mha.wq = mha.wk = mha.wv = mha.wo = w;
  tfk_ffn_config ffn;
  memset(&ffn, 0, sizeof(ffn));
  ffn.d_model = 8, ffn.d_ff = 8, ffn.act = TFK_ACT_RELU, ffn.w1 = ffn.w2 = w;
  tfk_mha* m = (tfk_mha*)0x1;
  tfk_ffn* f = (tfk_ffn*)0x1;
  tfk_block* b = (tfk_block*)0x1;
  tfk_mha_config bad_mha = mha;
  bad_mha.layout = (tfk_layout)4;
  Expect("mha layout", tfk_mha_create(&m, &bad_mha), "layout (4)", y, 0);
  bad_mha = mha, bad_mha.rope = 1, bad_mha.rope_pairing = (tfk_rope_pairing)6;
  Expect("mha rope_pairing", tfk_mha_create(&m, &bad_mha), "rope_pairing (6)", y, 0);
  tfk_ffn_config bad_ffn = ffn;
  bad_ffn.act = (tfk_activation)8;
  Expect("ffn act", tfk_ffn_create(&f, &bad_ffn), "act (8)", y, 0);
  bad_ffn = ffn, bad_ffn.layout = (tfk_layout)-2;
  Expect("ffn layout", tfk_ffn_create(&f, &bad_ffn), "layout (-2)", y, 0);
  tfk_block_config blk;
  memset(&blk, 0, sizeof(blk));
  blk.attn = mha, blk.ffn = ffn, blk.norm = (tfk_norm_kind)2;
  Expect("block norm", tfk_block_create(&b, &blk), "norm (2)", y, 0);
  if (m != (tfk_mha*)0x1 || f != (tfk_ffn*)0x1 || b != (tfk_block*)0x1) {
    fprintf(stderr, "FAIL a create wrote *out on error\n");
    ++failures;
  }
  /* The valid configs are accepted: the refusals above are the enums'. */
  if (tfk_mha_create(&m, &mha) != TFK_SUCCESS || tfk_ffn_create(&f, &ffn) != TFK_SUCCESS) {
    fprintf(stderr, "FAIL a valid config refused: %s\n", tfk_last_error());
    ++failures;
  } else {
    tfk_mha_destroy(m);
    tfk_ffn_destroy(f);
  }

  if (strcmp(tfk_status_string((tfk_status)99), "unknown status") != 0) {
    fprintf(stderr, "FAIL tfk_status_string(99) is '%s'\n", tfk_status_string((tfk_status)99));
    ++failures;
  }
  printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
