#pragma once
// NEURON_ASAN is 1 in an AddressSanitizer build, with GCC (which defines
// __SANITIZE_ADDRESS__) or clang (which, before version 16, only answers
// __has_feature(address_sanitizer)), else 0. Code and tests that must behave
// differently under ASan (its allocator keeps freed memory in quarantine, and
// it is several times slower) test this, never the compilers' macros.
#if defined(__SANITIZE_ADDRESS__)
#define NEURON_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NEURON_ASAN 1
#endif
#endif
#ifndef NEURON_ASAN
#define NEURON_ASAN 0
#endif
