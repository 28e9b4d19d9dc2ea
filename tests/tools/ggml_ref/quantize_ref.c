// Harness: reads f32 rows from stdin (u32 type, u32 n, n floats) and writes the reference blocks.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include "ggml-quants.h"
#include "ggml-common.h"
int main(void) {
  uint32_t type, n;
  while (fread(&type, 4, 1, stdin) == 1 && fread(&n, 4, 1, stdin) == 1) {
    float* x = malloc(n * 4); fread(x, 4, n, stdin);
    size_t bytes = 0; void* y;
    if (type == 12) { bytes = n / 256 * sizeof(block_q4_K); y = malloc(bytes); quantize_row_q4_K_ref(x, y, n); }
    else if (type == 14) { bytes = n / 256 * sizeof(block_q6_K); y = malloc(bytes); quantize_row_q6_K_ref(x, y, n); }
    else if (type == 8) { bytes = n / 32 * sizeof(block_q8_0); y = malloc(bytes); quantize_row_q8_0_ref(x, y, n); }
    else return 2;
    fwrite(y, 1, bytes, stdout); free(x); free(y);
  }
  return 0;
}
