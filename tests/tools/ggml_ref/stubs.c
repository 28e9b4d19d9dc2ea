#include <stdlib.h>
#include <stddef.h>
void ggml_abort(const char* f, int l, const char* fmt, ...) { (void)f; (void)l; (void)fmt; abort(); }
size_t ggml_row_size(int t, long n) { (void)t; (void)n; abort(); }
const char* ggml_type_name(int t) { (void)t; return "?"; }
size_t ggml_type_size(int t) { (void)t; abort(); }
